"""The engine's tests run on the toy action `rename_board` (tests/toy_action/): people, boards, reviewers
holding the action's own review permission, and a few helpers for the flows."""

import re

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from approvals.models import AuditRecord, Preview
from tests.conftest import agent_client_for, propose
from tests.toy_action.actions import BOARD_REVIEWERS

from .factories import BoardFactory, PersonFactory, StaffPersonFactory

TOOL = "rename_board"


def rename(agent, board_id="b-1", title="Plans for 2027", headers=None):
    """POST a rename_board tool call; returns the response."""
    return propose(agent, name=TOOL, headers=headers, board_id=board_id, title=title)


def proposed(agent, board_id="b-1", title="Plans for 2027") -> Preview:
    response = rename(agent, board_id=board_id, title=title)
    assert response.status_code == 201, response.json()
    return Preview.objects.get(pk=response.json()["preview"]["id"])


def events(preview) -> list[str]:
    return list(AuditRecord.objects.filter(preview=preview).order_by("id").values_list("event", flat=True))


def html(response) -> str:
    return response.content.decode()


def text_of(page: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", page).split())


def board_reviewers() -> Group:
    """The group the toy action declares, made with its permissions by the engine after migrate and
    again after a transactional test's flush (post_migrate)."""
    return Group.objects.get(name=BOARD_REVIEWERS)


def make_reviewer(username: str):
    person = StaffPersonFactory(username=username)
    person.groups.add(board_reviewers())
    return person


def logged_in(person, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(person)
    return client


@pytest.fixture
def owner(db):
    return PersonFactory(username="olive")


@pytest.fixture
def stranger(db):
    return PersonFactory(username="oscar")


@pytest.fixture
def board(owner):
    return BoardFactory(id="b-1", owner=owner, title="Roadmap")


@pytest.fixture
def strangers_board(stranger):
    return BoardFactory(id="b-2", owner=stranger, title="Oscar's board")


@pytest.fixture
def agent(owner):
    return agent_client_for(owner, tools=(TOOL,))


@pytest.fixture
def reviewer(db):
    return make_reviewer("rhea")


@pytest.fixture
def second_reviewer(db):
    return make_reviewer("remy")


@pytest.fixture
def owner_browser(owner):
    return logged_in(owner)
