"""The routes of spec 3, one module per resource; :data:`routers` in the order they are included."""

from fastapi import APIRouter

from app.api.routes import events, forks, health, history, lineage, sessions, stream

__all__ = ["routers"]

routers: tuple[APIRouter, ...] = (
    sessions.router,
    events.router,
    stream.router,
    history.router,
    lineage.router,
    forks.router,
    health.router,
)
