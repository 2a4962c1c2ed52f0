"""Witnesses cosign the audit log's checkpoints by c2sp.org/tlog-witness, tested against a real,
third-party witness (`aics-witness`, a process of its own, tests/witness_server.py): each seal is sent
with its old size and consistency proof, the cosignatures are verified and kept, a head is published
once its quorum cosigned it, and a witness that refuses (409 with its size, 422, 403, 404), answers
badly or not at all is handled as the protocol says and shows in /readyz (which stays 200) and /metrics."""

from __future__ import annotations

import base64
import http.server
import json
import os
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.utils import timezone

from approvals.audit import cosigning, seal, tlog, witnesses
from approvals.audit.checks import audit_witnesses_check
from approvals.core.digests import canonical_bytes
from approvals.core.services import audit_record
from approvals.models import AuditCosignature, AuditEvent, AuditRecord, AuditTreeHead, AuditWitnessAnswer, Preview
from tests.c2sp import aics_tlog
from tests.conftest import propose, seal_all
from tests.operations.helpers import METRICS_TOKEN, closed_port, samples, scrape, value
from tests.stuck_receivers import StuckReceiver
from tests.witness_server import AicsWitness

ORIGIN = "gateway.example.test/audit"
PROBE = {"HTTP_HOST": "10.1.2.3:8000"}


# A log of our own in memory, for the protocol alone (no database) --------------------------------


class MemoryLog:
    """Leaves in memory, tiles computed from them, checkpoints signed with a key of its own."""

    def __init__(self, origin: str = ORIGIN) -> None:
        self.origin = origin
        self.key = Ed25519PrivateKey.generate()
        self.vkey = tlog.verifier_key(origin, self.key.public_key())
        self.leaves: list[bytes] = []

    def append(self, count: int) -> None:
        start = len(self.leaves)
        self.leaves += [tlog.entry_leaf_hash(f"entry {index}".encode()) for index in range(start, start + count)]

    def _tile(self, level: int, index: int) -> bytes:
        hashes = self.leaves
        for _ in range(level):
            full = len(hashes) // tlog.TILE_WIDTH * tlog.TILE_WIDTH
            hashes = [tlog.subtree_root(hashes[i : i + tlog.TILE_WIDTH]) for i in range(0, full, tlog.TILE_WIDTH)]
        return b"".join(hashes[index * tlog.TILE_WIDTH : (index + 1) * tlog.TILE_WIDTH])

    def tree(self) -> tlog.TreeHashes:
        return tlog.TreeHashes(self._tile, len(self.leaves))

    def note(self) -> str:
        checkpoint = tlog.Checkpoint(self.origin, len(self.leaves), self.tree().root())
        return tlog.checkpoint_sign(checkpoint, [self.key]).serialize()

    def submit(self, pairs, *, known=lambda size: True, deadline=10.0):
        tree = self.tree()
        return witnesses.checkpoint_submit(
            self.note(),
            pairs,
            log_keys=[self.vkey],
            consistency_proof=lambda old: tree.consistency_proof(old),
            known_size=known,
            deadline_seconds=deadline,
        )


@pytest.fixture
def started(tmp_path):
    """Start witnesses; each is stopped at the end."""
    running: list[AicsWitness] = []

    def start(name: str, logs: list[tuple[str, str]], initial: tuple[int, str] | None = None) -> AicsWitness:
        witness = AicsWitness(tmp_path / name.replace("/", "_"), name, logs, initial).start()
        running.append(witness)
        return witness

    yield start
    for witness in running:
        witness.stop()


def test_the_protocol_against_aics_witness_old_sizes_proofs_across_tiles_and_a_409_followed(started):
    log = MemoryLog()
    peer = started("witness.test/w1", [(ORIGIN, log.vkey.text())])
    witness = witnesses.witness_entry_parse(peer.entry())
    log.append(3)
    (first,) = log.submit([(witness, 0)])
    assert first.outcome == "cosigned" and first.old_size == 0 and first.http_status == 200
    assert first.line.startswith("\u2014 witness.test/w1 ")
    log.append(600)  # past two tiles: the proof from 3 is built from level-0 and level-1 tiles
    (second,) = log.submit([(witness, 3)])
    assert second.outcome == "cosigned" and second.old_size == 3
    verified = tlog.checkpoint_verify(log.note() + second.line + "\n", [log.vkey], [witness.key])
    assert [key for key, _ in verified.cosigners] == [witness.key]
    assert verified.cosigners[0][1] == second.timestamp > 0
    # Told an old size the witness has moved past (a response that was lost): one retry from its size.
    log.append(10)
    (third,) = log.submit([(witness, 3)])
    assert (third.outcome, third.old_size) == ("cosigned", 603)
    assert peer.status()["logs"][0]["size"] == 613
    # A size the log has no checkpoint of is not followed: another history.
    log.append(1)
    (fourth,) = log.submit([(witness, 3)], known=lambda size: size != 613)
    assert (fourth.outcome, fourth.http_status, fourth.witness_size) == ("conflict", 409, 613)
    assert "no checkpoint of" in fourth.detail
    assert peer.status()["logs"][0]["size"] == 613


def test_a_body_is_the_old_size_the_proof_an_empty_line_and_the_checkpoint():
    note = "o\n2\n" + base64.b64encode(b"r" * 32).decode() + "\n\n\u2014 o AAAAAAAA\n"
    body = witnesses.add_checkpoint_body(1, [b"a" * 32, b"b" * 32], note)
    assert body.decode() == (
        f"old 1\n{base64.b64encode(b'a' * 32).decode()}\n{base64.b64encode(b'b' * 32).decode()}\n\n{note}"
    )
    assert witnesses.add_checkpoint_body(0, [], note).decode() == "old 0\n\n" + note
    with pytest.raises(ValueError, match="longer than the protocol allows"):
        witnesses.add_checkpoint_body(1, [b"a" * 32] * 64, note)


# Configuration -------------------------------------------------------------------------------------


def _cosigner_vkey(name: str = "witness.test/w1") -> str:
    key = Ed25519PrivateKey.generate().public_key()
    return tlog.verifier_key(name, key, tlog.SIGNATURE_COSIGNATURE_V1).text()


def test_witness_entries_are_parsed_and_a_malformed_one_is_a_system_check_error_not_a_crash(settings):
    good = _cosigner_vkey()
    note_key = tlog.verifier_key("witness.test/w2", Ed25519PrivateKey.generate().public_key()).text()
    settings.AUDIT_WITNESSES = [
        f"{good}=https://w1.example/add-checkpoint?x=1",
        f"{note_key}=https://w2.example/add-checkpoint",
        "witness.test/w3=https://w3.example/add-checkpoint",
        f"{_cosigner_vkey()}=ftp://w4.example/add-checkpoint",
        f"{_cosigner_vkey('witness.test/w1')}=https://again.example/add-checkpoint",
    ]
    settings.AUDIT_WITNESS_QUORUM = 1
    (witness,) = witnesses.witnesses_configured()
    assert (witness.vkey, witness.url, witness.name) == (
        good,
        "https://w1.example/add-checkpoint?x=1",
        "witness.test/w1",
    )
    errors = audit_witnesses_check(None)
    assert {error.id for error in errors} == {"approvals.E031"}
    messages = [error.msg for error in errors]
    assert len(messages) == 4, messages
    assert "entry 2" in messages[0] and "type 0x04" in messages[0]
    assert "entry 3" in messages[1] and "<name>+<key ID>+<key>" in messages[1]
    assert "entry 4" in messages[2] and "http:// or https://" in messages[2]
    assert "entry 5" in messages[3] and "listed twice" in messages[3]


def test_the_quorum_must_fit_the_witnesses(settings):
    settings.AUDIT_WITNESSES = [f"{_cosigner_vkey()}=https://w1.example/add-checkpoint"]
    settings.AUDIT_WITNESS_QUORUM = 1
    assert audit_witnesses_check(None) == []
    settings.AUDIT_WITNESS_QUORUM = 2
    (error,) = audit_witnesses_check(None)
    assert "AUDIT_WITNESS_QUORUM is 2: with 1 witnesses it is 1 to 1" in error.msg
    settings.AUDIT_WITNESS_QUORUM = 0
    assert "AUDIT_WITNESS_QUORUM is 0" in audit_witnesses_check(None)[0].msg
    settings.AUDIT_WITNESSES = []
    settings.AUDIT_WITNESS_QUORUM = 1
    assert "lists no witness" in audit_witnesses_check(None)[0].msg


# The log's own witnesses, against the database --------------------------------------------------------


@pytest.fixture
def gateway(settings, tmp_path):
    """The log under test: its origin, a checkpoints file, the metrics token; `configure` names the witnesses."""
    settings.AUDIT_LOG_ORIGIN = ORIGIN
    settings.AUDIT_CHECKPOINT_FILE = str(tmp_path / "checkpoints.jsonl")
    settings.METRICS_TOKEN = METRICS_TOKEN
    settings.AUDIT_WITNESS_DEADLINE_SECONDS = 10.0
    settings.AUDIT_WITNESS_RETRY_SECONDS = 0  # asked again at once; the pause has a test of its own

    class Gateway:
        log_vkey = seal.log_verifier_keys()[0].text()

        @staticmethod
        def configure(*entries: str, quorum: int | None = None) -> None:
            settings.AUDIT_WITNESSES = list(entries)
            settings.AUDIT_WITNESS_QUORUM = len(entries) if quorum is None else quorum

        @staticmethod
        def seal(alice, count: int = 1) -> AuditTreeHead:
            for _ in range(count):
                audit_record(event=AuditEvent.PROPOSED, actor=alice)
            seal_all()  # the cosignatures are asked for when the seal commits (Celery eager)
            head = seal.latest_head()
            assert head is not None
            return head

        @staticmethod
        def published_sizes() -> list[int]:
            path = Path(settings.AUDIT_CHECKPOINT_FILE)
            if not path.exists():
                return []
            return [json.loads(line)["size"] for line in path.read_text().splitlines() if line.strip()]

        @staticmethod
        def published_notes() -> list[str]:
            return [json.loads(line)["note"] for line in Path(settings.AUDIT_CHECKPOINT_FILE).read_text().splitlines()]

    return Gateway


def _readyz(client) -> dict:
    response = client.get("/readyz", **PROBE)
    assert response.status_code == 200, response.content  # witnesses never fail readiness
    return response.json()


def _metrics(client) -> dict:
    return samples(scrape(client))


def test_two_seals_are_cosigned_kept_published_and_verify_with_our_code_and_aics_tlog(
    transactional_db, alice, gateway, started, client, tmp_path
):
    peer = started("witness.test/w1", [(ORIGIN, gateway.log_vkey)])
    gateway.configure(peer.entry())
    witness_key = tlog.verifier_key_parse(peer.vkey)

    first = gateway.seal(alice)
    second = gateway.seal(alice, 2)
    assert (first.size, second.size) == (1, 3)

    rows = list(AuditCosignature.objects.order_by("head_id").values_list("head_id", "witness"))
    assert rows == [(1, peer.vkey), (3, peer.vkey)]
    answer = AuditWitnessAnswer.objects.get()
    assert (answer.outcome, answer.size, answer.old_size, answer.http_status) == ("cosigned", 3, 1, 200)
    assert peer.status()["logs"][0]["size"] == 3
    assert gateway.published_sizes() == [1, 3]
    assert seal.latest_published_head().size == 3

    served = client.get("/audit/checkpoint")
    assert served.status_code == 200
    note = served.content.decode()
    assert note == seal.checkpoint_note(second) == gateway.published_notes()[1]
    verified = tlog.checkpoint_verify(note, seal.log_verifier_keys(), [witness_key], origin=ORIGIN)
    assert verified.checkpoint.size == 3 and [key for key, _ in verified.cosigners] == [witness_key]
    (tmp_path / "checkpoint.txt").write_text(note)
    code, report = aics_tlog(
        "verify-checkpoint",
        "--note",
        str(tmp_path / "checkpoint.txt"),
        "--origin",
        ORIGIN,
        "--log-key",
        gateway.log_vkey,
        "--witness-key",
        peer.vkey,
        "--quorum",
        "1",
    )
    assert code == 0 and report.get("ok") is True, report
    # The witness's own view of the log is the same checkpoint (its monitoring endpoint).
    assert tlog.checkpoint_parse(tlog.note_parse(peer.monitored_checkpoint(ORIGIN)).text).size == 3

    body = _readyz(client)
    assert body["status"] == "ready" and "degraded" not in body
    assert body["audit_witnesses"] == {
        "status": "ok",
        "quorum": 1,
        "latest_size": 3,
        "published_size": 3,
        "unpublished_seconds": 0.0,
        "lagging": False,
        "witnesses": {"witness.test/w1": {"last_answer": "cosigned", "http_status": 200, "cosigned_size": 3}},
    }
    parsed = _metrics(client)
    assert value(parsed, "gateway_audit_unwitnessed_leaves") == 0
    assert value(parsed, "gateway_audit_witness_cosigned_size", witness="witness.test/w1") == 3
    assert value(parsed, "gateway_audit_witness_refusing", witness="witness.test/w1") == 0


def test_quorum_two_with_one_witness_down_publishes_nothing_new_until_it_is_back(
    transactional_db, alice, alice_agent, o12, gateway, started, client, settings
):
    first_peer = started("witness.test/w1", [(ORIGIN, gateway.log_vkey)])
    second_peer = started("witness.test/w2", [(ORIGIN, gateway.log_vkey)])
    gateway.configure(first_peer.entry(), second_peer.entry(), quorum=2)
    first = gateway.seal(alice)
    # One seal may make two heads when another transaction on the server holds the seal horizon back.
    before = gateway.published_sizes()
    assert before[-1] == first.size

    second_peer.stop()
    settings.AUDIT_WITNESS_LAG_MAX_SECONDS = 0  # any wait counts as lagging, for this test
    response = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    middle = gateway.seal(alice)
    assert set(AuditCosignature.objects.filter(head=middle).values_list("witness", flat=True)) == {first_peer.vkey}
    assert gateway.published_sizes() == before  # no line for the head w2 did not cosign
    assert seal.latest_published_head() == first
    served = client.get("/audit/checkpoint").content.decode()
    assert served == seal.checkpoint_note(first)
    receipt = seal.preview_receipt(preview)  # sealed, but not published: the receipt waits for it
    assert receipt["tree_head"]["size"] == first.size and receipt["records"] == []
    assert receipt["unsealed_records"] == AuditRecord.objects.filter(preview=preview).count() > 0
    down = AuditWitnessAnswer.objects.get(witness=second_peer.vkey)
    assert (down.outcome, down.size, down.http_status) == ("unreachable", middle.size, None)
    assert "ConnectError" in down.detail

    body = _readyz(client)
    assert body["degraded"] == ["audit_witnesses"]
    report = body["audit_witnesses"]
    assert report["status"] == "degraded" and report["unreachable"] == ["witness.test/w2"]
    assert (report["latest_size"], report["published_size"], report["lagging"]) == (middle.size, first.size, True)
    assert report["witnesses"]["witness.test/w2"] == {
        "last_answer": "unreachable",
        "http_status": None,
        "cosigned_size": first.size,
    }
    parsed = _metrics(client)
    assert value(parsed, "gateway_audit_unwitnessed_leaves") == middle.size - first.size
    assert value(parsed, "gateway_audit_unpublished_seconds") >= 0
    assert value(parsed, "gateway_audit_witness_unanswered_total", witness="witness.test/w2", status="connection") >= 1

    second_peer.start()
    settings.AUDIT_WITNESS_LAG_MAX_SECONDS = 300
    last = gateway.seal(alice)
    published = gateway.published_sizes()
    assert published[: len(before)] == before and published[-1] == last.size
    assert middle.size not in published  # the middle head never had its quorum; this one covers it
    back = AuditWitnessAnswer.objects.get(witness=second_peer.vkey)
    assert (back.outcome, back.size, back.old_size) == ("cosigned", last.size, first.size)  # a proof from there
    assert seal.latest_published_head() == last
    assert "degraded" not in _readyz(client)
    receipt = seal.preview_receipt(preview)
    assert receipt["tree_head"]["size"] == last.size and receipt["unsealed_records"] == 0
    witness_keys = [tlog.verifier_key_parse(first_peer.vkey), tlog.verifier_key_parse(second_peer.vkey)]
    for entry in receipt["records"]:
        _proof, verified = tlog.tlog_proof_verify(
            entry["tlog_proof"], canonical_bytes(entry["record"]), seal.log_verifier_keys(), witness_keys
        )
        assert sorted(key.name for key, _ in verified.cosigners) == ["witness.test/w1", "witness.test/w2"]


def test_a_head_is_published_once_when_its_quorum_is_reached_whoever_cosigns_after(
    transactional_db, alice, gateway, started
):
    first_peer = started("witness.test/w1", [(ORIGIN, gateway.log_vkey)])
    second_peer = started("witness.test/w2", [(ORIGIN, gateway.log_vkey)])
    gateway.configure(first_peer.entry(), second_peer.entry(), quorum=1)
    gateway.seal(alice)
    gateway.seal(alice)
    assert AuditCosignature.objects.filter(head_id=2).count() == 2
    assert gateway.published_sizes() == [1, 2]
    # Both cosignatures are served with it from then on.
    assert len(tlog.note_parse(seal.checkpoint_note(seal.latest_head())).signatures) == 3


def test_a_witness_ahead_of_the_log_is_reported_and_not_asked_again_for_the_same_head(
    transactional_db, alice, gateway, started, client
):
    elsewhere = base64.b64encode(os.urandom(32)).decode()
    peer = started("witness.test/ahead", [(ORIGIN, gateway.log_vkey)], initial=(1000, elsewhere))
    gateway.configure(peer.entry())
    before = value(
        _metrics(client),
        "gateway_audit_witness_refusals_total",
        witness="witness.test/ahead",
        status="409",
        outcome="ahead",
    )

    gateway.seal(alice)
    answer = AuditWitnessAnswer.objects.get()
    assert (answer.outcome, answer.http_status, answer.witness_size, answer.size) == ("ahead", 409, 1000, 1)
    assert "larger than any this log signed" in answer.detail
    assert not AuditCosignature.objects.exists()
    assert gateway.published_sizes() == [] and seal.latest_published_head() is None
    assert client.get("/audit/checkpoint").status_code == 404

    answered_at = answer.answered_at
    assert cosigning.cosignatures_collect() == []  # the same checkpoint is not sent again
    assert AuditWitnessAnswer.objects.get().answered_at == answered_at

    body = _readyz(client)
    assert body["status"] == "ready" and body["degraded"] == ["audit_witnesses"]
    assert body["audit_witnesses"]["refusing"] == ["witness.test/ahead"]
    parsed = _metrics(client)
    refusals = value(
        parsed, "gateway_audit_witness_refusals_total", witness="witness.test/ahead", status="409", outcome="ahead"
    )
    assert refusals == before + 1
    assert value(parsed, "gateway_audit_witness_refusing", witness="witness.test/ahead") == 1

    gateway.seal(alice)  # a new head is a new request: sent, and refused the same way
    assert (AuditWitnessAnswer.objects.get().size, AuditWitnessAnswer.objects.get().outcome) == (2, "ahead")


def test_a_witness_told_another_history_refuses_422_after_following_its_409(
    transactional_db, alice, gateway, started, client
):
    elsewhere = base64.b64encode(os.urandom(32)).decode()
    peer = started("witness.test/fork", [(ORIGIN, gateway.log_vkey)], initial=(1, elsewhere))
    gateway.configure(peer.entry())
    gateway.seal(alice)  # old 0: 409 naming 1, a size we have a head of; again from 1: the roots differ
    answer = AuditWitnessAnswer.objects.get()
    assert (answer.outcome, answer.http_status, answer.old_size, answer.size) == ("refused", 422, 1, 1)
    assert not AuditCosignature.objects.exists() and gateway.published_sizes() == []
    assert peer.status()["logs"][0]["evidence"] >= 1  # the witness kept our log-signed request as evidence
    body = _readyz(client)
    assert body["audit_witnesses"]["witnesses"]["witness.test/fork"]["http_status"] == 422
    assert body["audit_witnesses"]["refusing"] == ["witness.test/fork"]
    assert (
        value(
            _metrics(client),
            "gateway_audit_witness_refusals_total",
            witness="witness.test/fork",
            status="422",
            outcome="refused",
        )
        >= 1
    )


def test_witnesses_that_do_not_trust_the_log_refuse_403_and_404(transactional_db, alice, gateway, started, client):
    other_key = tlog.verifier_key(ORIGIN, Ed25519PrivateKey.generate().public_key()).text()
    untrusting = started("witness.test/other-key", [(ORIGIN, other_key)])
    elsewhere = tlog.verifier_key("elsewhere.example/log", Ed25519PrivateKey.generate().public_key()).text()
    unknowing = started("witness.test/other-log", [("elsewhere.example/log", elsewhere)])
    gateway.configure(untrusting.entry(), unknowing.entry(), quorum=1)
    gateway.seal(alice)
    answers = {answer.witness: (answer.outcome, answer.http_status) for answer in AuditWitnessAnswer.objects.all()}
    assert answers == {untrusting.vkey: ("refused", 403), unknowing.vkey: ("refused", 404)}
    assert gateway.published_sizes() == []
    report = _readyz(client)["audit_witnesses"]
    assert report["refusing"] == ["witness.test/other-key", "witness.test/other-log"]
    parsed = _metrics(client)
    assert (
        value(
            parsed,
            "gateway_audit_witness_refusals_total",
            witness="witness.test/other-key",
            status="403",
            outcome="refused",
        )
        >= 1
    )
    assert (
        value(
            parsed,
            "gateway_audit_witness_refusals_total",
            witness="witness.test/other-log",
            status="404",
            outcome="refused",
        )
        >= 1
    )


def test_a_cosignature_the_log_lost_is_asked_for_again_from_the_size_the_witness_names(
    transactional_db, alice, gateway, started
):
    peer = started("witness.test/w1", [(ORIGIN, gateway.log_vkey)])
    head = gateway.seal(alice)  # no witnesses configured yet: published at once
    witness = witnesses.witness_entry_parse(peer.entry())
    # The witness cosigns head 1 but the answer never reaches the log.
    (lost,) = witnesses.checkpoint_submit(
        head.note,
        [(witness, 0)],
        log_keys=seal.log_verifier_keys(),
        consistency_proof=lambda old: [],
        known_size=lambda size: True,
        deadline_seconds=5,
    )
    assert lost.outcome == "cosigned"
    gateway.configure(peer.entry())
    (submission,) = cosigning.cosignatures_collect()
    assert (submission.outcome, submission.old_size, submission.size) == ("cosigned", 1, 1)
    assert AuditCosignature.objects.get().witness == peer.vkey


def test_a_slow_witness_is_cut_off_at_the_deadline_while_the_others_are_asked_at_the_same_time(
    transactional_db, alice, gateway, started, settings
):
    peer = started("witness.test/w1", [(ORIGIN, gateway.log_vkey)])
    silent = StuckReceiver("silent", seconds=30)
    slow_vkey = _cosigner_vkey("witness.test/slow")
    settings.AUDIT_WITNESS_DEADLINE_SECONDS = 1.5
    try:
        gateway.configure(peer.entry(), f"{slow_vkey}={silent.url}", quorum=1)
        gateway.seal(alice)
        answers = {answer.witness: answer for answer in AuditWitnessAnswer.objects.all()}
        assert answers[peer.vkey].outcome == "cosigned"
        assert (answers[slow_vkey].outcome, answers[slow_vkey].http_status) == ("unreachable", None)
        assert "within 1.5 s" in answers[slow_vkey].detail
        assert gateway.published_sizes() == [1]  # quorum 1: published without the slow one
        # Timed apart from the seal (on PostgreSQL a seal may wait for other transactions on the server).
        audit_record(event=AuditEvent.PROPOSED, actor=alice)
        gateway.configure()
        seal_all()
        gateway.configure(peer.entry(), f"{slow_vkey}={silent.url}", quorum=1)
        began = time.monotonic()
        submissions = cosigning.cosignatures_collect()
        took = time.monotonic() - began
    finally:
        silent.close()
    assert sorted(submission.outcome for submission in submissions) == ["cosigned", "unreachable"]
    assert 1.5 <= took < 3.5, took  # both at once, within the one deadline


class _FakeWitness:
    """A witness on the wire that answers with what the test sets."""

    def __init__(self) -> None:
        self.status, self.content_type, self.body = 200, "text/plain", b""
        self.requests: list[bytes] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the standard library's name
                fake.requests.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(fake.status)
                self.send_header("Content-Type", fake.content_type)
                self.send_header("Content-Length", str(len(fake.body)))
                self.end_headers()
                self.wfile.write(fake.body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/add-checkpoint"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_witness():
    fake = _FakeWitness()
    yield fake
    fake.close()


def test_a_cosignature_that_does_not_verify_is_not_kept_and_a_5xx_is_asked_again_by_the_task(
    transactional_db, alice, gateway, fake_witness, client
):
    from approvals import tasks

    key = Ed25519PrivateKey.generate()
    vkey = tlog.verifier_key("witness.test/fake", key.public_key(), tlog.SIGNATURE_COSIGNATURE_V1).text()
    gateway.configure(f"{vkey}={fake_witness.url}")
    fake_witness.status, fake_witness.body = 503, b"busy"
    gateway.seal(alice)
    answer = AuditWitnessAnswer.objects.get()
    assert (answer.outcome, answer.http_status, answer.size) == ("unreachable", 503, 1)
    # The request: the old size 0, no proof, the note with the log's signature only.
    assert fake_witness.requests[-1].decode() == "old 0\n\n" + seal.latest_head().note

    def cosignature_by(signer: Ed25519PrivateKey) -> bytes:
        text = tlog.note_parse(seal.latest_head().note).text
        signed = tlog.cosignature_sign("witness.test/fake", signer, int(time.time()), text)
        # The configured key's name and ID, whoever signed: only the signature tells them apart.
        return tlog.SignatureLine(signed.name, tlog.verifier_key_parse(vkey).key_id, signed.signature).text().encode()

    fake_witness.status, fake_witness.body = 200, cosignature_by(Ed25519PrivateKey.generate())
    (bad,) = cosigning.cosignatures_collect()
    assert (bad.outcome, bad.http_status) == ("bad_answer", 200)
    assert "does not verify" in bad.detail
    assert not AuditCosignature.objects.exists() and gateway.published_sizes() == []

    fake_witness.status, fake_witness.body = 503, b"busy"
    gateway.seal(alice)  # a new head: asked again, and again no answer
    assert AuditWitnessAnswer.objects.get().size == 2
    retried: list[float] = []

    def retry(countdown: float, **kwargs: object) -> Exception:
        retried.append(countdown)
        return RuntimeError("retried")

    task = tasks.cosign_audit_checkpoint
    task.push_request(retries=1, is_eager=False)
    task.retry = retry
    try:
        with pytest.raises(RuntimeError, match="retried"):
            task.run(2)
        assert retried == [cosigning.retry_countdown(1)]
        fake_witness.status, fake_witness.body = 200, cosignature_by(key)
        task.run(2)  # cosigned: kept, published, no retry
        assert len(retried) == 1
    finally:
        del task.retry
        task.pop_request()
    assert list(AuditCosignature.objects.values_list("head_id", "witness")) == [(2, vkey)]
    assert gateway.published_sizes() == [2]
    parsed = _metrics(client)
    assert (
        value(
            parsed,
            "gateway_audit_witness_refusals_total",
            witness="witness.test/fake",
            status="200",
            outcome="bad_answer",
        )
        >= 1
    )
    assert value(parsed, "gateway_audit_witness_unanswered_total", witness="witness.test/fake", status="503") >= 2


def test_a_witness_that_did_not_answer_or_refused_is_asked_again_after_a_pause_and_by_one_task_at_a_time(
    transactional_db, alice, gateway, fake_witness, settings
):
    vkey = _cosigner_vkey("witness.test/fake")
    gateway.configure(f"{vkey}={fake_witness.url}")
    settings.AUDIT_WITNESS_RETRY_SECONDS = 30
    assert [cosigning.retry_countdown(retries) for retries in range(5)] == [30, 60, 120, 240, 300]
    fake_witness.status, fake_witness.body = 503, b"busy"
    gateway.seal(alice)
    assert len(fake_witness.requests) == 1
    gateway.seal(alice)  # sealed within the pause: not sent (a down witness costs one deadline per pause)
    assert cosigning.cosignatures_collect() == []
    assert len(fake_witness.requests) == 1
    AuditWitnessAnswer.objects.update(answered_at=timezone.now() - timedelta(seconds=31))
    (again,) = cosigning.cosignatures_collect()
    assert (again.outcome, again.size, len(fake_witness.requests)) == ("unreachable", 2, 2)

    fake_witness.status, fake_witness.body = 404, b"unknown log"
    AuditWitnessAnswer.objects.update(answered_at=timezone.now() - timedelta(seconds=31))
    (refused,) = cosigning.cosignatures_collect()
    assert (refused.outcome, refused.http_status) == ("refused", 404)
    gateway.seal(alice)  # a new head, but within the pause after the refusal
    assert len(fake_witness.requests) == 3
    AuditWitnessAnswer.objects.update(answered_at=timezone.now() - timedelta(seconds=31))

    # Another task is asking it: this one leaves it alone, until that claim runs out.
    AuditWitnessAnswer.objects.update(asking_until=timezone.now() + timedelta(seconds=60))
    assert cosigning.cosignatures_collect() == []
    AuditWitnessAnswer.objects.update(asking_until=timezone.now() - timedelta(seconds=1))
    (taken,) = cosigning.cosignatures_collect()
    assert (taken.outcome, taken.size, len(fake_witness.requests)) == ("refused", 3, 4)
    assert AuditWitnessAnswer.objects.get().asking_until is None


def test_without_witnesses_readyz_and_metrics_say_nothing_of_them(db, client, gateway, settings):
    settings.AUDIT_WITNESSES = []
    assert "audit_witnesses" not in _readyz(client)
    assert not any(
        name.startswith("gateway_audit_witness") or name == "gateway_audit_unwitnessed_leaves"
        for name, _ in _metrics(client)
    )


def test_a_witness_down_never_fails_readiness_and_nothing_it_says_leaks(transactional_db, alice, gateway, client):
    vkey = _cosigner_vkey("witness.test/down")
    gateway.configure(f"{vkey}=http://127.0.0.1:{closed_port()}/add-checkpoint")
    gateway.seal(alice)
    body = _readyz(client)
    assert body["status"] == "ready" and body["degraded"] == ["audit_witnesses"]
    text = json.dumps(body)
    assert "127.0.0.1" not in text and "ConnectError" not in text and vkey not in text


def test_a_malformed_witness_entry_is_reported_at_request_time_never_raised(db, client, gateway, settings):
    settings.AUDIT_WITNESSES = ["not-a-witness", f"{_cosigner_vkey()}=https://w1.example/add-checkpoint"]
    settings.AUDIT_WITNESS_QUORUM = 2
    body = _readyz(client)
    assert body["degraded"] == ["audit_witnesses"]
    report = body["audit_witnesses"]
    assert report["misconfigured"] is True and list(report["witnesses"]) == ["witness.test/w1"]
    assert value(_metrics(client), "gateway_audit_witness_cosigned_size", witness="witness.test/w1") == 0


@pytest.mark.postgres
def test_a_deliveries_worker_collects_the_cosignatures_through_redis(
    transactional_db, alice, gateway, started, settings
):
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    from tests.workers import publishing_to, start_worker, stop, wait_for

    peer = started("witness.test/w1", [(ORIGIN, gateway.log_vkey)])
    gateway.configure(peer.entry())
    settings.CELERY_TASK_ALWAYS_EAGER = False  # the outbox hands its messages to the broker, not in-process
    worker = start_worker(
        settings.REDIS_URL,
        ("AUDIT_SIGNING_KEY", settings.AUDIT_SIGNING_KEY),
        ("AUDIT_LOG_ORIGIN", ORIGIN),
        ("AUDIT_WITNESSES", peer.entry()),
        ("AUDIT_CHECKPOINT_FILE", settings.AUDIT_CHECKPOINT_FILE),
        queues=["deliveries"],
    )
    try:
        with publishing_to(settings.REDIS_URL):
            head = gateway.seal(alice)
            cosigned = wait_for(lambda: AuditCosignature.objects.filter(head=head).exists())
    finally:
        log = stop(worker)
    assert cosigned, log[-3000:]
    assert "approvals.deliver_outbox[" in log, log[-3000:]
    assert AuditCosignature.objects.get().witness == peer.vkey
    assert gateway.published_sizes() == [head.size]  # by the worker, once the quorum (1) cosigned
