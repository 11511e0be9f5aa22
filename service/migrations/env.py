"""Alembic environment: migrations run on the connection the caller passes in
``config.attributes["connection"]`` (see :func:`service.runtime.database.migrate`)."""

from __future__ import annotations

from alembic import context

from service.runtime.database import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "pdwatt's migrations run through `pdwatt db upgrade` or on the service's first use "
        "of a database, which pass the connection"
    )
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
