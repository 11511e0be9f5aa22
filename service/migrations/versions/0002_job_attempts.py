"""Jobs run by workers on other machines: each attempt's number, the worker that holds
the job and its last heartbeat (a job whose heartbeat stops is retried or failed).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0"))
        )
        batch.add_column(sa.Column("worker", sa.String(128), nullable=True))
        batch.add_column(sa.Column("heartbeat", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("heartbeat")
        batch.drop_column("worker")
        batch.drop_column("attempts")
