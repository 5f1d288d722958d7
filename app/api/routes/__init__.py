"""The routes of spec 3, one module per resource, and the docs pages; :data:`routers` in the order they are included."""

from fastapi import APIRouter

from app.api.routes import docs, events, forks, health, history, lineage, metrics, sessions, stream, turns

__all__ = ["routers"]

routers: tuple[APIRouter, ...] = (
    sessions.router,
    events.router,
    turns.router,
    stream.router,
    history.router,
    lineage.router,
    forks.router,
    health.router,
    metrics.router,
    docs.router,
)
