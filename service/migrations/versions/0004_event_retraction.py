"""Retracting events: each site keeps the grid it was registered with (the body of its
last POST or PUT) and that registration's version, so that its grid can be recomputed
from it and the events merged since; an event records when it was retracted and the
site version its retraction made.

A site registered before this revision gets its registered grid only when no event was
merged into it (its grid is then the registered one); the others' stays unknown until
their next PUT.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sites") as batch:
        batch.add_column(sa.Column("registered_grid", sa.JSON, nullable=True))
        batch.add_column(sa.Column("registered_version", sa.Integer, nullable=True))
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("retracted", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("retracted_version", sa.Integer, nullable=True))
    sites = sa.table(
        "sites",
        sa.column("id", sa.String),
        sa.column("body", sa.JSON),
        sa.column("version", sa.Integer),
        sa.column("registered_grid", sa.JSON),
        sa.column("registered_version", sa.Integer),
    )
    events = sa.table("events", sa.column("site_id", sa.String))
    conn = op.get_bind()
    with_events = set(conn.execute(sa.select(events.c.site_id).distinct()).scalars())
    rows = conn.execute(sa.select(sites.c.id, sites.c.body, sites.c.version)).all()
    for site_id, body, version in rows:
        if site_id in with_events or not isinstance(body, dict) or "grid" not in body:
            continue
        conn.execute(
            sa.update(sites)
            .where(sites.c.id == site_id)
            .values(registered_grid=body["grid"], registered_version=version)
        )


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_column("retracted_version")
        batch.drop_column("retracted")
    with op.batch_alter_table("sites") as batch:
        batch.drop_column("registered_version")
        batch.drop_column("registered_grid")
