"""Memory as Model Context Protocol tools (``server``) over stdio or HTTP (``transport``)."""
