"""What asked for a plan or a job: a plan's ``trigger`` (event, retraction, forecast,
shed, period, user), the ``job_id`` that made it (null for a synchronous request) and
``duration_s`` (how long it took to make); a job's ``trigger``. Null for the plans and
jobs stored before this revision (what asked for them was not kept).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("trigger", sa.String(16), nullable=True))
        batch.add_column(sa.Column("job_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("duration_s", sa.Float, nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("trigger", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("trigger")
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("duration_s")
        batch.drop_column("job_id")
        batch.drop_column("trigger")
