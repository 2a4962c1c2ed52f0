"""The audit log in the C2SP transparency-log formats, so that tools we did not write can check it:

- c2sp.org/signed-note (Ed25519, type 0x01) and its verifier keys `<name>+<hex key ID>+<base64>`;
- c2sp.org/tlog-checkpoint (origin, size, base64 root) signed as a note, key name = origin;
- c2sp.org/tlog-cosignature (cosignature/v1, type 0x04), the lines witnesses add;
- c2sp.org/tlog-tiles (height 8, the `x` path encoding, partial tiles `.p/<W>`, entry bundles);
- c2sp.org/tlog-proof@v1, the offline proof of one entry;
- RFC 6962 / 9162 inclusion and consistency proofs, made from tiles (O(log n) tiles read) and checked.

Pure: no database, no Django, so that `verify_evidence` and `python -m approvals.audit.log` run anywhere.
Written here rather than taken from a package: the Python implementations of these formats on PyPI
(`aics-tlog` among them) need Python 3.12 or newer, and the project runs on 3.11; the tests check these
functions against `aics-tlog` in a virtual environment of its own.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT  # 256 hashes
HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

SIGNATURE_ED25519 = 0x01
SIGNATURE_COSIGNATURE_V1 = 0x04
TLOG_PROOF_HEADER = "c2sp.org/tlog-proof@v1"
MAX_NOTE_SIGNATURES = 100


class FormatError(ValueError):
    """Text that is not what the C2SP format says (the message says which rule)."""


# Hashing (RFC 6962 section 2.1) ------------------------------------------------------------------


def entry_leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, *, what: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise FormatError(f"{what} is not base64") from error
    if _b64(raw) != text:
        raise FormatError(f"{what} is not canonical base64")
    return raw


def _raw_public_key(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


# Signed notes and verifier keys -------------------------------------------------------------------


def key_id(name: str, signature_type: int, public_key: bytes) -> bytes:
    """SHA-256(key name || 0x0A || signature type || public key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([signature_type]) + public_key).digest()[:4]


def _check_key_name(name: str) -> None:
    if not name or any(character.isspace() or character == "+" for character in name):
        raise FormatError(f"key name {name!r} is empty or holds a space or a plus")


@dataclass(frozen=True)
class VerifierKey:
    name: str
    key_id: bytes
    signature_type: int
    public_key: bytes  # the 32 bytes of the Ed25519 key

    @property
    def ed25519(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(self.public_key)

    def text(self) -> str:
        return f"{self.name}+{self.key_id.hex()}+{_b64(bytes([self.signature_type]) + self.public_key)}"


def verifier_key(name: str, public_key: Ed25519PublicKey, signature_type: int = SIGNATURE_ED25519) -> VerifierKey:
    _check_key_name(name)
    raw = _raw_public_key(public_key)
    return VerifierKey(name, key_id(name, signature_type, raw), signature_type, raw)


def verifier_key_parse(text: str) -> VerifierKey:
    """`<name>+<hex key ID>+<base64(type || key)>`, Ed25519 note keys (0x01) and cosigner keys (0x04)."""
    parts = text.strip().split("+", 2)  # the base64 key may hold pluses itself
    if len(parts) != 3:
        raise FormatError("a verifier key is <name>+<key ID>+<key>")
    name, hex_id, encoded = parts
    _check_key_name(name)
    if not re.fullmatch(r"[0-9a-f]{8}", hex_id):
        raise FormatError("a verifier key's ID is 8 lowercase hex digits")
    material = _unb64(encoded, what="the verifier key")
    if len(material) != 33 or material[0] not in (SIGNATURE_ED25519, SIGNATURE_COSIGNATURE_V1):
        raise FormatError("only Ed25519 verifier keys (types 0x01 and 0x04) are supported")
    signature_type, public_key = material[0], material[1:]
    if key_id(name, signature_type, public_key) != bytes.fromhex(hex_id):
        raise FormatError("the verifier key's ID does not match its name and key")
    return VerifierKey(name, bytes.fromhex(hex_id), signature_type, public_key)


@dataclass(frozen=True)
class SignatureLine:
    name: str
    key_id: bytes
    signature: bytes  # what follows the key ID

    def text(self) -> str:
        return f"\u2014 {self.name} {_b64(self.key_id + self.signature)}\n"


@dataclass(frozen=True)
class Note:
    text: str  # ends with a newline
    signatures: tuple[SignatureLine, ...]

    def serialize(self) -> str:
        return self.text + "\n" + "".join(line.text() for line in self.signatures)


def note_parse(note: str) -> Note:
    if not note.endswith("\n"):
        raise FormatError("a signed note ends with a newline")
    if any(ord(character) < 0x20 and character != "\n" for character in note):
        raise FormatError("a signed note holds no control characters but newlines")
    separator = note.rfind("\n\n")
    if separator < 0:
        raise FormatError("a signed note has a blank line between its text and its signatures")
    text, lines = note[: separator + 1], note[separator + 2 :].split("\n")[:-1]
    if not lines or len(lines) > MAX_NOTE_SIGNATURES:
        raise FormatError("a signed note has between 1 and 100 signature lines")
    signatures = []
    for line in lines:
        match = re.fullmatch(r"\u2014 (\S+) (\S+)", line)
        if not match:
            raise FormatError(f"malformed signature line {line!r}")
        name, encoded = match.groups()
        _check_key_name(name)
        raw = _unb64(encoded, what="a signature")
        if len(raw) < 5:
            raise FormatError("a signature is a key ID and the signature bytes")
        signatures.append(SignatureLine(name, raw[:4], raw[4:]))
    return Note(text, tuple(signatures))


def note_sign(text: str, signers: Sequence[tuple[str, Ed25519PrivateKey]]) -> Note:
    """Sign the text (ending in a newline) with each (key name, Ed25519 key), type 0x01."""
    if not text.endswith("\n") or "\n\n" in text:
        raise FormatError("a note's text ends with a newline and has no blank line")
    lines = []
    for name, private_key in signers:
        vkey = verifier_key(name, private_key.public_key())
        lines.append(SignatureLine(name, vkey.key_id, private_key.sign(text.encode())))
    return Note(text, tuple(lines))


def _known(line: SignatureLine, keys: Iterable[VerifierKey]) -> VerifierKey | None:
    for key in keys:
        if key.name == line.name and key.key_id == line.key_id:
            return key
    return None


def note_verified_by(note: Note, keys: Sequence[VerifierKey]) -> list[VerifierKey]:
    """The note's keys among `keys` whose signatures verify, as signed-note says: lines of unknown keys are
    ignored; a known key's line that fails rejects the note (FormatError); none verifying rejects it too."""
    verified: list[VerifierKey] = []
    for line in note.signatures:
        key = _known(line, [key for key in keys if key.signature_type == SIGNATURE_ED25519])
        if key is None:
            continue
        try:
            key.ed25519.verify(line.signature, note.text.encode())
        except InvalidSignature:
            raise FormatError(f"the signature of {key.name} ({key.key_id.hex()}) does not verify") from None
        if key in verified:
            raise FormatError(f"two signatures of {key.name} ({key.key_id.hex()})")
        verified.append(key)
    if not verified:
        raise FormatError("no signature of a trusted key")
    return verified


# Checkpoints and cosignatures ---------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes

    def text(self) -> str:
        return f"{self.origin}\n{self.size}\n{_b64(self.root)}\n"


def checkpoint_parse(text: str) -> Checkpoint:
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise FormatError("a checkpoint is an origin, a size and a root, each on its own line")
    origin, size, root = lines[0], lines[1], lines[2]
    if not origin:
        raise FormatError("a checkpoint's origin is not empty")
    if "" in lines[3:-1]:
        raise FormatError("a checkpoint's extension lines are not empty")
    if not re.fullmatch(r"0|[1-9][0-9]*", size) or int(size) >= 1 << 63:
        raise FormatError("a checkpoint's size is a decimal with no leading zeroes")
    raw_root = _unb64(root, what="the checkpoint's root")
    if len(raw_root) != HASH_SIZE:
        raise FormatError("a checkpoint's root is 32 bytes")
    return Checkpoint(origin, int(size), raw_root)


def checkpoint_sign(checkpoint: Checkpoint, private_keys: Sequence[Ed25519PrivateKey]) -> Note:
    """A checkpoint note signed by each key (two during a key rotation), key name = origin."""
    return note_sign(checkpoint.text(), [(checkpoint.origin, key) for key in private_keys])


@dataclass(frozen=True)
class VerifiedCheckpoint:
    checkpoint: Checkpoint
    log_keys: tuple[VerifierKey, ...]
    cosigners: tuple[tuple[VerifierKey, int], ...]  # (witness key, cosignature timestamp)


def cosignature_message(timestamp: int, checkpoint_text: str) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n".encode() + checkpoint_text.encode()


def cosignature_sign(name: str, private_key: Ed25519PrivateKey, timestamp: int, checkpoint_text: str) -> SignatureLine:
    """A witness's cosignature line (what tests' stand-in witnesses return)."""
    vkey = verifier_key(name, private_key.public_key(), SIGNATURE_COSIGNATURE_V1)
    signature = private_key.sign(cosignature_message(timestamp, checkpoint_text))
    return SignatureLine(name, vkey.key_id, struct.pack(">Q", timestamp) + signature)


def checkpoint_verify(
    note_text: str,
    log_keys: Sequence[VerifierKey],
    witness_keys: Sequence[VerifierKey] = (),
    *,
    origin: str | None = None,
) -> VerifiedCheckpoint:
    """Check a checkpoint note: signed by one of `log_keys` (key name = origin), and which of
    `witness_keys` cosigned it. A known key whose line fails rejects it (FormatError)."""
    note = note_parse(note_text)
    checkpoint = checkpoint_parse(note.text)
    if origin is not None and checkpoint.origin != origin:
        raise FormatError(f"the checkpoint's origin is {checkpoint.origin!r}, not {origin!r}")
    log = note_verified_by(note, [key for key in log_keys if key.name == checkpoint.origin])
    cosigners: list[tuple[VerifierKey, int]] = []
    for line in note.signatures:
        key = _known(line, [key for key in witness_keys if key.signature_type == SIGNATURE_COSIGNATURE_V1])
        if key is None:
            continue
        if len(line.signature) != 8 + 64:
            raise FormatError(f"the cosignature of {key.name} is not a timestamp and an Ed25519 signature")
        (timestamp,) = struct.unpack(">Q", line.signature[:8])
        try:
            key.ed25519.verify(line.signature[8:], cosignature_message(timestamp, note.text))
        except InvalidSignature:
            raise FormatError(f"the cosignature of {key.name} does not verify") from None
        if any(known == key for known, _ in cosigners):
            raise FormatError(f"two cosignatures of {key.name}")
        cosigners.append((key, timestamp))
    return VerifiedCheckpoint(checkpoint, tuple(log), tuple(cosigners))


def cosignature_lines_parse(body: str) -> list[SignatureLine]:
    """A witness's add-checkpoint answer: one or more signature lines."""
    if not body.endswith("\n"):
        raise FormatError("a witness answers signature lines, each ending with a newline")
    return list(note_parse("x\n\n" + body).signatures)


# Tiles --------------------------------------------------------------------------------------------


def tile_index_path(index: int) -> str:
    """1234067 -> 'x001/x234/067'."""
    if index < 0:
        raise FormatError("a tile index is not negative")
    groups = []
    while True:
        groups.append(f"{index % 1000:03d}")
        index //= 1000
        if index == 0:
            break
    groups.reverse()
    return "/".join([f"x{group}" for group in groups[:-1]] + [groups[-1]])


def tile_path(level: int | str, index: int, width: int = TILE_WIDTH) -> str:
    """`tile/<L>/<N>[.p/<W>]`, level 'entries' for entry bundles."""
    suffix = "" if width == TILE_WIDTH else f".p/{width}"
    return f"tile/{level}/{tile_index_path(index)}{suffix}"


TILE_PATH = re.compile(
    r"(?P<level>entries|0|[1-9][0-9]?)/(?P<index>(?:x[0-9]{3}/)*[0-9]{3})(?:\.p/(?P<width>[1-9][0-9]{0,2}))?"
)


def tile_path_parse(path: str) -> tuple[str, int, int]:
    """'<L>/<N>[.p/<W>]' (after `tile/`) -> (level, index, width); FormatError for anything else."""
    match = TILE_PATH.fullmatch(path)
    if not match:
        raise FormatError("not a tile path")
    level, groups = match["level"], match["index"].split("/")
    if level != "entries" and int(level) > 63:
        raise FormatError("a tile level is at most 63")
    if len(groups) > 1 and groups[0] == "x000":
        raise FormatError("a tile index has no leading zero groups")
    index = int("".join(group.lstrip("x") for group in groups))
    width = int(match["width"]) if match["width"] else TILE_WIDTH
    if width > TILE_WIDTH - 1 and match["width"]:
        raise FormatError("a partial tile is 1 to 255 hashes wide")
    return level, index, width


def tile_widths(size: int, level: int) -> tuple[int, int]:
    """For a tree of `size` leaves: how many full tiles level `level` has, and the partial one's width."""
    count = size >> (TILE_HEIGHT * level)
    return count // TILE_WIDTH, count % TILE_WIDTH


def entry_bundle(entries: Iterable[bytes]) -> bytes:
    """Entries each prefixed with its length, big-endian uint16."""
    out = bytearray()
    for entry in entries:
        if len(entry) >= 1 << 16:
            raise FormatError("an entry is at most 65535 bytes")
        out += struct.pack(">H", len(entry)) + entry
    return bytes(out)


def entry_bundle_parse(data: bytes) -> list[bytes]:
    entries, offset = [], 0
    while offset < len(data):
        if offset + 2 > len(data):
            raise FormatError("an entry bundle ends inside a length")
        (length,) = struct.unpack(">H", data[offset : offset + 2])
        offset += 2
        if offset + length > len(data):
            raise FormatError("an entry bundle ends inside an entry")
        entries.append(data[offset : offset + length])
        offset += length
    return entries


def tile_hashes_append(tile: bytes, hashes: Sequence[bytes]) -> bytes:
    return tile + b"".join(hashes)


def subtree_root(hashes: Sequence[bytes]) -> bytes:
    """The root of a perfect subtree over 2**k hashes."""
    level = list(hashes)
    if not level or len(level) & (len(level) - 1):
        raise ValueError("a perfect subtree has a power of two of leaves")
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


# Proofs from tiles --------------------------------------------------------------------------------

# read_tile(level, index) -> the tile's bytes as stored (a full tile, or the right edge's partial one).
TileReader = Callable[[int, int], bytes]


class TreeHashes:
    """Merkle tree hashes of a tree of `size` leaves, read from its tiles: a complete subtree of 2**h
    leaves is a hash in a tile (h a multiple of 8) or the root of 2**(h % 8) consecutive hashes of one
    tile; any other range is combined from complete subtrees. A proof reads O(log n) tiles.

    Each complete subtree's hash is computed once per instance (the records of one receipt share most of
    their proofs' subtrees, and one at the top level is the root of up to 128 hashes)."""

    def __init__(self, read_tile: TileReader, size: int) -> None:
        self.read_tile = read_tile
        self.size = size
        self._tiles: dict[tuple[int, int], bytes] = {}
        self._complete: dict[tuple[int, int], bytes] = {}

    def grown(self, size: int) -> TreeHashes:
        """The tree after leaves were appended up to `size`: its tiles are read again (the right edge's
        changed), the complete subtrees already computed are kept (an append changes none of them)."""
        if size < self.size:
            raise ValueError("a tree only grows")
        tree = TreeHashes(self.read_tile, size)
        tree._complete = self._complete
        return tree

    def _tile(self, level: int, index: int) -> bytes:
        key = (level, index)
        if key not in self._tiles:
            self._tiles[key] = self.read_tile(level, index)
        return self._tiles[key]

    def complete(self, height: int, position: int) -> bytes:
        """MTH(D[position * 2**height : (position + 1) * 2**height]), all inside the tree."""
        if (position + 1) << height > self.size:
            raise ValueError("that subtree is not complete in this tree")
        known = self._complete.get((height, position))
        if known is not None:
            return known
        level, rest = divmod(height, TILE_HEIGHT)
        first = position << rest  # the first hash at tile level `level`
        count = 1 << rest
        tile_index, offset = divmod(first, TILE_WIDTH)
        tile = self._tile(level, tile_index)
        chunk = tile[offset * HASH_SIZE : (offset + count) * HASH_SIZE]
        if len(chunk) != count * HASH_SIZE:
            raise TileMissing(level, tile_index)
        root = subtree_root([chunk[i : i + HASH_SIZE] for i in range(0, len(chunk), HASH_SIZE)])
        self._complete[(height, position)] = root
        return root

    def range(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) for a range RFC 6962 splits into (start a multiple of the split)."""
        if start == end:
            return EMPTY_ROOT
        width = end - start
        if width & (width - 1) == 0 and start % width == 0:
            return self.complete(width.bit_length() - 1, start // width)
        split = 1 << ((width - 1).bit_length() - 1)
        return node_hash(self.range(start, start + split), self.range(start + split, end))

    def root(self, size: int | None = None) -> bytes:
        return self.range(0, self.size if size is None else size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 6962 section 2.1.1 PATH(index, D[0:size]), from the leaf's sibling up."""
        size = self.size if size is None else size
        if not 0 <= index < size <= self.size:
            raise ValueError("the leaf is not in that tree")
        proof: list[bytes] = []
        start, end = 0, size
        while end - start > 1:
            split = 1 << ((end - start - 1).bit_length() - 1)
            if index < start + split:
                proof.append(self.range(start + split, end))
                end = start + split
            else:
                proof.append(self.range(start, start + split))
                start += split
        proof.reverse()
        return proof

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        """RFC 6962 section 2.1.2 PROOF(old, D[0:new])."""
        new = self.size if new is None else new
        if not 0 <= old <= new <= self.size:
            raise ValueError("no such pair of tree sizes")
        if old == 0 or old == new:
            return []
        return self._subproof(old, 0, new, True)

    def _subproof(self, m: int, start: int, end: int, whole: bool) -> list[bytes]:
        n = end - start
        if m == n:
            return [] if whole else [self.range(start, end)]
        split = 1 << ((n - 1).bit_length() - 1)
        if m <= split:
            return self._subproof(m, start, start + split, whole) + [self.range(start + split, end)]
        return self._subproof(m - split, start + split, end, False) + [self.range(start, start + split)]


class TileMissing(LookupError):
    def __init__(self, level: int, index: int) -> None:
        super().__init__(f"tile {level}/{index} is missing or too short")
        self.level, self.index = level, index


# Checking proofs (RFC 9162 sections 2.1.3.2 and 2.1.4.2) ----------------------------------------------


def inclusion_root(leaf: bytes, index: int, size: int, proof: Sequence[bytes]) -> bytes:
    """The root that an inclusion proof leads to from the leaf hash; ValueError if it is malformed."""
    if not 0 <= index < size:
        raise ValueError("the index lies outside the tree")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if len(p) != HASH_SIZE or sn == 0:
            raise ValueError("the proof is too long or holds something that is not a hash")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ValueError("the proof is too short")
    return r


def inclusion_valid(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> bool:
    try:
        return inclusion_root(leaf, index, size, proof) == root
    except ValueError:
        return False


def consistency_valid(old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    if not 0 <= old <= new:
        return False
    if old == new:
        return not proof and old_root == new_root
    if old == 0:
        return not proof and old_root == EMPTY_ROOT
    path = list(proof)
    if any(len(p) != HASH_SIZE for p in path):
        return False
    if old & (old - 1) == 0:  # a power of two: the old root is the first node
        path.insert(0, old_root)
    if not path:
        return False
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == old_root and sr == new_root and sn == 0


# tlog-proof@v1 --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TlogProof:
    index: int
    hashes: tuple[bytes, ...]
    checkpoint_note: str
    extra: bytes | None = None

    def text(self) -> str:
        lines = [TLOG_PROOF_HEADER]
        if self.extra is not None:
            lines.append(f"extra {_b64(self.extra)}")
        lines.append(f"index {self.index}")
        lines.extend(_b64(h) for h in self.hashes)
        return "\n".join(lines) + "\n\n" + self.checkpoint_note


def tlog_proof_parse(text: str) -> TlogProof:
    head, separator, checkpoint_note = text.partition("\n\n")
    if not separator:
        raise FormatError("a tlog proof has a blank line before its checkpoint")
    lines = head.split("\n")
    if lines[0] != TLOG_PROOF_HEADER:
        raise FormatError(f"a tlog proof starts with {TLOG_PROOF_HEADER}")
    lines = lines[1:]
    extra = None
    if lines and lines[0].startswith("extra "):
        extra = _unb64(lines.pop(0)[len("extra ") :], what="the extra data")
    if not lines or not re.fullmatch(r"index (0|[1-9][0-9]*)", lines[0]):
        raise FormatError("a tlog proof names its index")
    index = int(lines.pop(0).split(" ")[1])
    hashes = tuple(_unb64(line, what="a proof hash") for line in lines)
    if any(len(h) != HASH_SIZE for h in hashes):
        raise FormatError("a proof hash is 32 bytes")
    return TlogProof(index, hashes, checkpoint_note, extra)


def tlog_proof_verify(
    text: str,
    entry: bytes,
    log_keys: Sequence[VerifierKey],
    witness_keys: Sequence[VerifierKey] = (),
    *,
    origin: str | None = None,
) -> tuple[TlogProof, VerifiedCheckpoint]:
    """The proof's checkpoint is signed by a log key and `entry` is its leaf at the proof's index."""
    proof = tlog_proof_parse(text)
    verified = checkpoint_verify(proof.checkpoint_note, log_keys, witness_keys, origin=origin)
    checkpoint = verified.checkpoint
    if not inclusion_valid(entry_leaf_hash(entry), proof.index, checkpoint.size, proof.hashes, checkpoint.root):
        raise FormatError(f"entry {proof.index} is not in the checkpointed tree of {checkpoint.size}")
    return proof, verified
