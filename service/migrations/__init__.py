"""Schema migrations of the service's database (Alembic); applied on first use of a
database by :func:`service.runtime.database.engine_for`, or by ``pdwatt db upgrade``."""
