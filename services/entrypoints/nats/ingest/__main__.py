"""``python -m engramdb.services.entrypoints.nats.ingest > docs/asyncapi.json``"""

import json

from engramdb.services.entrypoints.nats.ingest.asyncapi import asyncapi_document

if __name__ == "__main__":
    print(json.dumps(asyncapi_document(), indent=2, ensure_ascii=False))
