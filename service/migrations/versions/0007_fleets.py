"""Fleets that persist: ``fleets`` (regions, routing and solver over registered sites),
``fleet_sites`` (their member sites, in order) and ``fleet_plans`` (each plan with the
fleet's and every member site's version it was computed from).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fleets",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("body", sa.JSON, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "fleet_sites",
        sa.Column("fleet_id", sa.String(32), sa.ForeignKey("fleets.id"), primary_key=True),
        sa.Column("site_id", sa.String(32), sa.ForeignKey("sites.id"), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
    )
    op.create_index("ix_fleet_sites_site_id", "fleet_sites", ["site_id"])
    op.create_table(
        "fleet_plans",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("fleet_id", sa.String(32), sa.ForeignKey("fleets.id"), nullable=False),
        sa.Column("fleet_version", sa.Integer, nullable=False),
        sa.Column("site_versions", sa.JSON, nullable=False),
        sa.Column("plan_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("duration_s", sa.Float, nullable=True),
        sa.Column("response", sa.JSON, nullable=False),
    )
    op.create_index("ix_fleet_plans_fleet_id", "fleet_plans", ["fleet_id"])


def downgrade() -> None:
    op.drop_index("ix_fleet_plans_fleet_id", "fleet_plans")
    op.drop_table("fleet_plans")
    op.drop_index("ix_fleet_sites_site_id", "fleet_sites")
    op.drop_table("fleet_sites")
    op.drop_table("fleets")
