"""Re-plans of a site coalesce: a job's ``coalesce`` scope (``site_plan:<site id>``)
and ``queued_for``, the same scope while the job is queued and null otherwise, unique,
so that at most one job of a scope waits at a time (a newer request replaces it).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("coalesce", sa.String(128), nullable=True))
        batch.add_column(sa.Column("queued_for", sa.String(128), nullable=True))
        batch.create_index("ix_jobs_coalesce", ["coalesce"])
        batch.create_unique_constraint("uq_jobs_queued_for", ["queued_for"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("uq_jobs_queued_for", type_="unique")
        batch.drop_index("ix_jobs_coalesce")
        batch.drop_column("queued_for")
        batch.drop_column("coalesce")
