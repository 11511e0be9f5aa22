"""Webhooks: the URL a job's end is POSTed to, the delivery's state (claimed once by the
process that sends it) and its outcome.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("webhook_url", sa.String(2048), nullable=True))
        batch.add_column(sa.Column("webhook_state", sa.String(16), nullable=True))
        batch.add_column(sa.Column("webhook_outcome", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("webhook_outcome")
        batch.drop_column("webhook_state")
        batch.drop_column("webhook_url")
