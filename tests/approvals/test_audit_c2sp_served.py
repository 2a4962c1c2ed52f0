"""The live log, checked with a stock C2SP client: aics-tlog (its own virtual environment, a subprocess)
fetches the checkpoint and tiles the gateway serves under /audit/, verifies the checkpoint with the key
`manage.py audit_public_key --note` prints, proves sealed records in it and that a later checkpoint
extends an earlier one; each receipt's tlog-proof verifies with it too. And the endpoints answer as
c2sp.org/tlog-tiles says: content types, caching, partial widths, 404s, the entry bundles' token.

aics-tlog sends no Authorization header, so it proves leaves by hash from the public tiles; the entry
bundles are fetched with the token here, checked against the tiles, and handed to aics-tlog as a local
mirror (a second `--tiles` source, which it tries when the log answers 401)."""

from __future__ import annotations

import base64
import gzip
import json
import urllib.error
import urllib.request
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from approvals.audit import tlog
from approvals.audit.log import private_key_from, public_key_text, record_content
from approvals.audit.seal import inclusion_proof, latest_head
from approvals.core.digests import canonical_bytes
from approvals.core.services import audit_record
from approvals.models import AuditEvent, AuditLeaf, AuditRecord, AuditTile
from tests.c2sp import aics_tlog
from tests.conftest import propose, seal_all, tampering

READ_TOKEN = "audit-read-token-for-the-interop-tests"


@pytest.fixture
def read_token(settings) -> str:
    settings.AUDIT_READ_TOKEN = READ_TOKEN
    return READ_TOKEN


@pytest.fixture
def vkey() -> str:
    """The log's verifier key as an auditor gets it from the operator."""
    out = StringIO()
    call_command("audit_public_key", "--note", stdout=out)
    return out.getvalue().strip()


def records_up_to(count: int, actor) -> None:
    """Audit records (real ones, as the app writes them) until there are `count` in all."""
    for number in range(AuditRecord.objects.count(), count):
        audit_record(event=AuditEvent.SHOP_DATA_CHANGED, actor=actor, result={"filler": number})


def sealed_log(count: int, actor) -> int:
    records_up_to(count, actor)
    seal_all()
    head = latest_head()
    assert head is not None and head.size == count
    return head.size


def write(path: Path, data: str | bytes) -> str:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return str(path)


def b64_lines(hashes) -> str:
    return "".join(base64.b64encode(h).decode() + "\n" for h in hashes)


def leaf_hash_at(index: int) -> str:
    return AuditLeaf.objects.get(index=index).leaf_hash


def http_get(url: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
            headers = {key.lower(): value for key, value in response.headers.items()}
            status = response.status
    except urllib.error.HTTPError as error:
        body, headers, status = error.read(), {k.lower(): v for k, v in error.headers.items()}, error.code
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    return status, headers, body


# aics-tlog against the live server ------------------------------------------------------------------


@pytest.fixture
def served_log(live_server, transactional_db, alice_agent, o12, alice):
    """A preview's records among 300 sealed ones (a full level 0 tile and a partial one of 44)."""
    response = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    assert response.status_code == 201, response.json()
    sealed_log(300, alice)
    return f"{live_server.url}/audit/", response.json()["preview"]["id"]


def test_aics_tlog_verifies_the_served_checkpoint_and_its_tiles_with_the_operators_key(served_log, vkey, tmp_path):
    url, _ = served_log
    saved = tmp_path / "last.note"
    code, report = aics_tlog("verify-checkpoint", "--tiles", url, "--log-key", vkey, "--save-checkpoint", str(saved))

    assert code == 0, report
    head = latest_head()
    assert (report["size"], report["root"], report["tiles_ok"]) == (
        300,
        base64.b64encode(bytes.fromhex(head.root_hash)).decode(),
        True,
    )
    assert saved.read_text() == head.note


def test_aics_tlog_proves_sealed_records_from_the_served_tiles_by_their_leaf_hashes(served_log, vkey):
    url, preview_id = served_log
    proposed = AuditLeaf.objects.get(record__preview_id=preview_id, record__event=AuditEvent.PROPOSED).index
    for index in sorted({0, 255, 256, 299, proposed}):
        code, report = aics_tlog(
            "verify-inclusion", "--tiles", url, "--log-key", vkey, "--index", str(index),
            "--leaf-hash", leaf_hash_at(index),
        )  # fmt: skip
        assert code == 0, (index, report)
        assert report["proof_length"] == len(inclusion_proof(index, 300))

    code, report = aics_tlog(
        "verify-inclusion", "--tiles", url, "--log-key", vkey, "--index", "7", "--leaf-hash", leaf_hash_at(8)
    )
    assert (code, report["error"]) == (1, "the leaf is not included at this index under the checkpoint")


def test_entry_bundles_fetched_with_the_token_hash_to_the_served_tiles_and_aics_tlog_proves_them(
    served_log, vkey, read_token, tmp_path
):
    url, _ = served_log
    # Without the token aics-tlog cannot read entries (it sends no Authorization header).
    code, report = aics_tlog("verify-inclusion", "--tiles", url, "--log-key", vkey, "--index", "3")
    assert code == 1
    assert "HTTP 401" in report["error"]

    mirror = tmp_path / "entries-mirror"
    for path, width in (("tile/entries/000", 256), ("tile/entries/001.p/44", 44)):
        status, _, bundle = http_get(url + path, read_token)
        assert status == 200
        entries = tlog.entry_bundle_parse(bundle)
        first = 0 if path.endswith("000") else 256
        _, _, tile = http_get(url + path.replace("entries", "0"))
        assert [tlog.entry_leaf_hash(entry) for entry in entries] == [tile[i : i + 32] for i in range(0, len(tile), 32)]
        assert len(entries) == width
        assert [entry for entry in entries] == [
            canonical_bytes(record_content(leaf.record))
            for leaf in AuditLeaf.objects.filter(index__gte=first, index__lt=first + width)
            .select_related("record")
            .order_by("index")
        ]
        (mirror / path).parent.mkdir(parents=True, exist_ok=True)
        (mirror / path).write_bytes(bundle)

    for index in (3, 299):
        entry_out = tmp_path / f"entry-{index}"
        code, report = aics_tlog(
            "verify-inclusion", "--tiles", url, "--tiles", str(mirror), "--log-key", vkey, "--index", str(index),
            "--entry-out", str(entry_out),
        )  # fmt: skip
        assert code == 0, (index, report)
        assert report["leaf_hash"] == leaf_hash_at(index)
        assert json.loads(entry_out.read_bytes()) == record_content(AuditLeaf.objects.get(index=index).record)


def test_aics_tlog_proves_a_later_served_checkpoint_extends_a_saved_one(served_log, vkey, alice, tmp_path):
    url, _ = served_log
    saved = tmp_path / "last.note"
    code, report = aics_tlog("verify-checkpoint", "--tiles", url, "--log-key", vkey, "--save-checkpoint", str(saved))
    assert code == 0, report

    sealed_log(300 + 260, alice)  # the partial tile fills up, a new one starts, level 1 grows
    code, report = aics_tlog(
        "verify-consistency", "--tiles", url, "--log-key", vkey, "--old-checkpoint", str(saved),
        "--save-checkpoint", str(saved),
    )  # fmt: skip
    assert code == 0, report
    assert (report["old_size"], report["new_size"]) == (300, 560)
    assert tlog.checkpoint_parse(tlog.note_parse(saved.read_text()).text).size == 560


def test_a_changed_byte_in_a_stored_tile_is_refused_by_aics_tlog(served_log, vkey):
    url, _ = served_log
    tile = AuditTile.objects.get(level=0, index=0)
    changed = bytearray(tile.hashes)
    changed[32 * 5] ^= 0x01  # leaf 5's hash
    with tampering():
        AuditTile.objects.filter(pk=tile.pk).update(hashes=bytes(changed))

    code, report = aics_tlog(
        "verify-inclusion", "--tiles", url, "--log-key", vkey, "--index", "4", "--leaf-hash", leaf_hash_at(4)
    )
    assert code == 1
    assert report["error"].startswith("TileVerificationError: "), report
    assert "tile/0/000" in report["error"]


def test_each_receipt_tlog_proof_verifies_with_aics_tlog(served_log, alice_agent, vkey, tmp_path):
    _, preview_id = served_log
    response = alice_agent.get(f"/api/agent/previews/{preview_id}/receipt")
    assert response.status_code == 200, response.content
    receipt = response.json()
    assert receipt["records"], receipt

    for entry in receipt["records"]:
        proof = tlog.tlog_proof_parse(entry["tlog_proof"])
        assert proof.extra == canonical_bytes(entry["record"])
        assert proof.index == entry["leaf_index"]
        assert tlog.entry_leaf_hash(proof.extra).hex() == leaf_hash_at(proof.index)
        assert proof.checkpoint_note == receipt["tree_head"]["note"]
        # aics-tlog has no tlog-proof@v1 reader: its parts go to the proof-file mode ...
        code, report = aics_tlog(
            "verify-inclusion",
            "--leaf", write(tmp_path / "entry", proof.extra),
            "--index", str(proof.index),
            "--checkpoint", write(tmp_path / "checkpoint.note", proof.checkpoint_note),
            "--log-key", vkey,
            "--proof", write(tmp_path / "proof.b64", b64_lines(proof.hashes)),
        )  # fmt: skip
        assert code == 0, report
        assert (report["checkpoint_verified"], report["size"]) == (True, 300)
        # ... and to its offline bundle.
        code, report = aics_tlog(
            "verify-bundle", "--bundle", write(tmp_path / "bundle.json", json.dumps(wire_bundle(proof))),
            "--log-key", vkey, "--offline",
        )  # fmt: skip
        assert code == 0, report
        assert report["leaf_hash"] == leaf_hash_at(proof.index)


def wire_bundle(proof: tlog.TlogProof) -> dict:
    """A tlog-proof@v1 in aics-tlog's offline bundle form (U64 = unpadded base64url)."""

    def u64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    assert proof.extra is not None
    return {
        "entry_bytes": u64(proof.extra),
        "index": proof.index,
        "inclusion_proof": [base64.b64encode(h).decode() for h in proof.hashes],
        "checkpoint_note": u64(proof.checkpoint_note.encode()),
        "envelope": None,
        "body_or_ct": None,
    }


# The endpoints, as c2sp.org/tlog-tiles says ---------------------------------------------------------


@pytest.fixture
def log_of_300(db, alice_agent, o12, alice) -> int:
    response = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    assert response.status_code == 201, response.json()
    return sealed_log(300, alice)


def test_the_served_tiles_and_entry_bundles_are_byte_identical_to_aics_tlog_build_tiles(
    client, log_of_300, read_token, tmp_path
):
    entries = [
        canonical_bytes(record_content(leaf.record))
        for leaf in AuditLeaf.objects.select_related("record").order_by("index")
    ]
    assert not [entry for entry in entries if b"\n" in entry]  # canonical JSON escapes newlines
    leaves = write(tmp_path / "leaves", b"".join(entry + b"\n" for entry in entries))
    code, report = aics_tlog("build-tiles", "--zero", "--leaves", leaves, "--out", str(tmp_path / "built"))
    assert code == 0, report
    assert report["root"] == base64.b64encode(bytes.fromhex(latest_head().root_hash)).decode()

    built = sorted(path for path in (tmp_path / "built").rglob("*") if path.is_file())
    assert [str(path.relative_to(tmp_path / "built")) for path in built] == [
        "tile/0/000",
        "tile/0/001.p/44",
        "tile/1/000.p/1",
        "tile/entries/000",
        "tile/entries/001.p/44",
    ]
    for path in built:
        name = str(path.relative_to(tmp_path / "built"))
        response = client.get(f"/audit/{name}", headers={"Authorization": f"Bearer {read_token}"})
        assert response.status_code == 200, name
        body = gzip.decompress(response.content) if response.get("Content-Encoding") == "gzip" else response.content
        assert body == path.read_bytes(), name


def test_the_checkpoint_is_plain_text_cached_a_few_seconds(client, log_of_300):
    response = client.get("/audit/checkpoint")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    max_age = dict(part.strip().partition("=")[::2] for part in response["Cache-Control"].split(",")).get("max-age")
    assert max_age is not None and 0 <= int(max_age) <= 10, response["Cache-Control"]
    assert "immutable" not in response["Cache-Control"]
    assert response.content.decode() == latest_head().note


def test_no_checkpoint_before_the_first_seal(client, db):
    assert client.get("/audit/checkpoint").status_code == 404


@pytest.mark.parametrize(
    "path, hashes",
    [
        ("tile/0/000", 256),
        ("tile/0/001.p/44", 44),
        ("tile/1/000.p/1", 1),
        # A prefix of a full tile, for a client of an older checkpoint (size 100).
        ("tile/0/000.p/100", 100),
    ],
)
def test_tiles_are_octet_streams_cached_for_good(client, log_of_300, path, hashes):
    response = client.get(f"/audit/{path}")

    assert response.status_code == 200, path
    assert response["Content-Type"] == "application/octet-stream"
    assert "immutable" in response["Cache-Control"] and "max-age=31536000" in response["Cache-Control"]
    assert "private" not in response["Cache-Control"]
    level, index, width = tlog.tile_path_parse(path.removeprefix("tile/"))
    assert len(response.content) == hashes * 32
    assert response.content == bytes(AuditTile.objects.get(level=int(level), index=index).hashes)[: width * 32]


def test_the_served_tiles_give_the_checkpoints_root_and_the_records_leaf_hashes(client, log_of_300):
    tiles = {
        (0, 0): client.get("/audit/tile/0/000").content,
        (0, 1): client.get("/audit/tile/0/001.p/44").content,
        (1, 0): client.get("/audit/tile/1/000.p/1").content,
    }
    tree = tlog.TreeHashes(lambda level, index: tiles.get((level, index), b""), 300)
    assert tree.root().hex() == latest_head().root_hash
    level_0 = tiles[(0, 0)] + tiles[(0, 1)]
    assert [level_0[i : i + 32].hex() for i in range(0, len(level_0), 32)] == list(
        AuditLeaf.objects.order_by("index").values_list("leaf_hash", flat=True)
    )


@pytest.mark.parametrize(
    "path",
    [
        "tile/0/001",  # full: the tree has 44 of its 256 hashes
        "tile/0/001.p/45",  # wider than the tree's right edge
        "tile/0/002.p/1",  # beyond the tree
        "tile/1/000",  # level 1 has one hash
        "tile/1/000.p/2",
        "tile/2/000.p/1",  # no level 2 in a tree of 300
        "tile/0/x000/001",  # a leading zero group
        "tile/0/1",  # not three digits
        "tile/64/000",  # level 64
        "tile/00/000",  # a leading zero in the level
        "tile/0/000.p/256",  # a partial tile is 1 to 255 wide
        "tile/0/000.p/0",
        "tile/0/000.p/044",
        "tile/0/000.p/",
        "tile/0/000/",
        "tile/-1/000",
        "tile/entries",
        "tile/",
    ],
)
def test_tiles_beyond_the_tree_and_malformed_paths_are_404(client, log_of_300, path):
    response = client.get(f"/audit/{path}")

    assert response.status_code == 404, path


def test_entry_bundles_need_the_read_token_and_say_nothing_without_it(client, log_of_300, read_token):
    for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": f"Basic {read_token}"}):
        response = client.get("/audit/tile/entries/000", headers=headers)
        assert response.status_code == 401, headers
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert response["WWW-Authenticate"].startswith("Bearer")
        body = response.content.decode()
        assert "Authorization: Bearer" in body
        for record in AuditRecord.objects.all()[:5]:
            assert json.dumps(record_content(record))[:40] not in body
        assert b'"event"' not in response.content


def test_entry_bundles_are_refused_to_everyone_when_no_token_is_configured(client, log_of_300, settings):
    settings.AUDIT_READ_TOKEN = ""
    for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": "Bearer"}):
        assert client.get("/audit/tile/entries/000", headers=headers).status_code == 401, headers


@pytest.mark.parametrize("path, first, width", [("000", 0, 256), ("001.p/44", 256, 44), ("000.p/10", 0, 10)])
def test_entry_bundles_are_served_with_the_token(client, log_of_300, read_token, path, first, width):
    response = client.get(f"/audit/tile/entries/{path}", headers={"Authorization": f"Bearer {read_token}"})

    assert response.status_code == 200
    assert response["Content-Type"] == "application/octet-stream"
    assert "private" in response["Cache-Control"] and "public" not in response["Cache-Control"]
    body = gzip.decompress(response.content) if response.get("Content-Encoding") == "gzip" else response.content
    entries = tlog.entry_bundle_parse(body)
    leaves = AuditLeaf.objects.filter(index__gte=first, index__lt=first + width).order_by("index")
    assert [tlog.entry_leaf_hash(entry).hex() for entry in entries] == [leaf.leaf_hash for leaf in leaves]
    assert [json.loads(entry) for entry in entries] == [record_content(leaf.record) for leaf in leaves]


@pytest.mark.parametrize("path", ["001", "001.p/45", "002.p/1", "x000/001", "000.p/0", "000.p/256"])
def test_entry_bundles_beyond_the_tree_or_malformed_are_404_with_the_token(client, log_of_300, read_token, path):
    response = client.get(f"/audit/tile/entries/{path}", headers={"Authorization": f"Bearer {read_token}"})

    assert response.status_code == 404, path


def test_during_a_key_rotation_the_served_checkpoint_verifies_with_either_key_and_old_ones_with_the_retired_key(
    client, alice, settings, tmp_path
):
    old_key = settings.AUDIT_SIGNING_KEY
    sealed_log(3, alice)
    old_note = write(tmp_path / "old.note", client.get("/audit/checkpoint").content)
    old_vkey = tlog.verifier_key(settings.AUDIT_LOG_ORIGIN, private_key_from(old_key).public_key()).text()

    new_key = base64.b64encode(bytes(range(32))).decode()
    settings.AUDIT_SIGNING_KEY = f"{new_key},{old_key}"
    out = StringIO()
    call_command("audit_public_key", "--note", stdout=out)
    new_vkey, printed_old_vkey = out.getvalue().split()
    assert printed_old_vkey == old_vkey
    sealed_log(5, alice)
    note = write(tmp_path / "rotating.note", client.get("/audit/checkpoint").content)
    for vkey in (new_vkey, old_vkey):
        code, report = aics_tlog(
            "verify-checkpoint", "--note", note, "--log-key", vkey, "--origin", settings.AUDIT_LOG_ORIGIN
        )
        assert (code, report["size"]) == (0, 5), report

    settings.AUDIT_SIGNING_KEY = new_key
    settings.AUDIT_SIGNING_KEYS_RETIRED = [public_key_text(private_key_from(old_key))]
    sealed_log(6, alice)
    note = write(tmp_path / "new.note", client.get("/audit/checkpoint").content)
    code, report = aics_tlog("verify-checkpoint", "--note", note, "--log-key", new_vkey)
    assert (code, report["size"]) == (0, 6), report
    code, report = aics_tlog("verify-checkpoint", "--note", note, "--log-key", old_vkey)
    assert (code, report["error"]) == (
        1,
        f"no signature from log key {old_vkey.split('+')[0]} {old_vkey.split('+')[1]}",
    )
    code, report = aics_tlog("verify-checkpoint", "--note", old_note, "--log-key", old_vkey)
    assert (code, report["size"]) == (0, 3), report
