"""Word lists of the rule-based extractor (EN + PT): names, jobs, relations, verb forms.

Why its own module: the vocabularies are data, not logic — the part most often extended
("add a job word", "add a PT verb") and the bulk of the extractor's lines. Kept apart so
they can be read and grown without wading through regexes or the extraction decisions.
Pure data: nothing here depends on the other rule-based modules.
"""

from __future__ import annotations

# Lower-case words that may join the capitalised parts of one name ("Rio de Janeiro").
CONNECTORS = ("de", "da", "do", "dos", "das", "of", "del", "van", "von")


def _words(text: str) -> frozenset[str]:
    """A word list written as a whitespace-separated block (readable, easy to extend)."""
    return frozenset(text.split())


# Words after a sentence-initial capitalised word that make it likely a name.
NAME_FOLLOWERS = _words(
    """
    is was has had and said says told lives lived works worked moved loves likes enjoys
    will would just got went came gave took called asked wants needs can could did does
    é foi está estava tem tinha mora morava trabalha trabalhava mudou gosta adora ama vai
    disse falou e também já
    """
)

PT_MARKERS = _words(
    "eu meu minha não que de em na no com para pra você é está sou moro trabalho uma um "
    "mas também muito agora ontem hoje"
)
EN_MARKERS = _words(
    "i my me the and is are was to in at with for you it not but also very now a an"
)

JOB_WORDS = _words(
    """
    teacher engineer developer programmer doctor nurse lawyer student designer writer
    artist musician manager chef cook accountant architect scientist researcher consultant
    dentist pharmacist photographer journalist firefighter officer counselor therapist
    psychologist driver farmer pilot mechanic electrician plumber carpenter librarian
    professor surgeon veterinarian vet analyst entrepreneur founder freelancer painter
    singer dancer actor actress baker barista cashier salesman waiter waitress coach
    trainer tutor editor translator economist biologist chemist physicist mathematician
    historian secretary receptionist assistant intern director ceo cto cfo
    professora engenheiro engenheira desenvolvedor desenvolvedora programador programadora
    médico médica enfermeiro enfermeira advogado advogada estudante arquiteto arquiteta
    jornalista motorista vendedor vendedora policial cozinheiro cozinheira garçom garçonete
    dentista psicólogo psicóloga contador contadora empresário empresária gerente analista
    cientista pesquisador pesquisadora músico musicista artista escritor escritora
    fotógrafo fotógrafa designer pintor pintora cantor cantora ator atriz padeiro padeira
    bombeiro bombeira piloto mecânico eletricista encanador carpinteiro bibliotecário
    bibliotecária cirurgião cirurgiã veterinário veterinária economista biólogo bióloga
    químico química físico física tradutor tradutora secretária recepcionista estagiário
    estagiária diretor diretora consultor consultora treinador treinadora
    """
)
JOB_SUFFIXES_EN = ("ist", "ian", "eer", "ologist")
NOT_JOBS = _words(
    """
    fan lover mother father sister brother daughter son wife husband friend member beginner
    newbie believer optimist pessimist perfectionist realist idealist introvert extrovert
    vegetarian vegan christian otimista pessimista perfeccionista realista idealista egoísta
    """
)
JOB_STOP = _words(
    "of at in for and with who that from on to by de em na no que e com do da para pela pelo"
)

# relation word (lower-case; "best friend" may be two words) -> relation_type
RELATIONS: dict[str, str] = {
    "wife": "married_to",
    "husband": "married_to",
    "spouse": "married_to",
    "partner": "partner_of",
    "girlfriend": "partner_of",
    "boyfriend": "partner_of",
    "fiance": "engaged_to",
    "fiancé": "engaged_to",
    "fiancee": "engaged_to",
    "fiancée": "engaged_to",
    "best friend": "friend_of",
    "friend": "friend_of",
    "sister": "sibling_of",
    "brother": "sibling_of",
    "mother": "child_of",
    "mom": "child_of",
    "father": "child_of",
    "dad": "child_of",
    "son": "parent_of",
    "daughter": "parent_of",
    "boss": "reports_to",
    "manager": "reports_to",
    "colleague": "colleague_of",
    "coworker": "colleague_of",
    "co-worker": "colleague_of",
    "cousin": "cousin_of",
    "aunt": "relative_of",
    "uncle": "relative_of",
    "grandmother": "grandchild_of",
    "grandma": "grandchild_of",
    "grandfather": "grandchild_of",
    "grandpa": "grandchild_of",
    "neighbor": "neighbor_of",
    "neighbour": "neighbor_of",
    "roommate": "roommate_of",
    "esposa": "married_to",
    "marido": "married_to",
    "mulher": "married_to",
    "namorada": "partner_of",
    "namorado": "partner_of",
    "noiva": "engaged_to",
    "noivo": "engaged_to",
    "melhor amiga": "friend_of",
    "melhor amigo": "friend_of",
    "amiga": "friend_of",
    "amigo": "friend_of",
    "irmã": "sibling_of",
    "irmão": "sibling_of",
    "mãe": "child_of",
    "pai": "child_of",
    "filho": "parent_of",
    "filha": "parent_of",
    "chefe": "reports_to",
    "colega": "colleague_of",
    "primo": "cousin_of",
    "prima": "cousin_of",
    "tia": "relative_of",
    "tio": "relative_of",
    "avó": "grandchild_of",
    "avô": "grandchild_of",
    "vizinha": "neighbor_of",
    "vizinho": "neighbor_of",
}

SINGLE_VALUED = ("residence", "workplace", "job_title", "relationship_status", "age")

# EN present-tense verbs after "I": their third-person forms.
EN_IRREGULAR = {
    "am": "is",
    "'m": "is",
    "’m": "is",
    "have": "has",
    "'ve": "has",
    "’ve": "has",
    "do": "does",
    "don't": "doesn't",
    "don’t": "doesn’t",
    "didn't": "didn't",
    "didn’t": "didn’t",
    "go": "goes",
    "was": "was",
}
EN_ADVERBS = _words(
    "just also really recently finally still never always now actually usually often"
)
EN_MODALS = _words("can could will would should might must may did was had")
PT_VERBS = {
    "sou": "é",
    "estou": "está",
    "tenho": "tem",
    "vou": "vai",
    "fui": "foi",
    "moro": "mora",
    "trabalho": "trabalha",
    "gosto": "gosta",
    "adoro": "adora",
    "amo": "ama",
    "prefiro": "prefere",
    "vivo": "vive",
    "estudo": "estuda",
    "faço": "faz",
    "quero": "quer",
    "preciso": "precisa",
    "acho": "acha",
    "sei": "sabe",
    "posso": "pode",
    "estava": "estava",
    "tinha": "tinha",
    "morava": "morava",
    "trabalhava": "trabalhava",
    "comecei": "começou",
    "fiz": "fez",
    "tive": "teve",
    "estive": "esteve",
    "pude": "pôde",
    "quis": "quis",
    "vi": "viu",
}
