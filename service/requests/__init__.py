"""What a request is and what this server accepts: the request and response schemas of
the HTTP API (``schemas``, ``dr``) and the server's limits checked before any work
(``limits``)."""
