// Check one record of an evidence bundle against its c2sp.org/tlog-proof@v1, with Go's own
// golang.org/x/mod/sumdb/note and golang.org/x/mod/sumdb/tlog:
//
//	go run . '<origin>+<key ID>+<key>' records/<id>.json records/<id>.tlog-proof
package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "INVALID: "+format+"\n", args...)
	os.Exit(1)
}

func hashOf(text string) tlog.Hash {
	raw, err := base64.StdEncoding.DecodeString(text)
	if err != nil || len(raw) != tlog.HashSize {
		fail("%q is not a base64 SHA-256 hash", text)
	}
	var hash tlog.Hash
	copy(hash[:], raw)
	return hash
}

func main() {
	if len(os.Args) != 4 {
		fail("usage: checkproof VKEY RECORD.json RECORD.tlog-proof")
	}
	verifier, err := note.NewVerifier(os.Args[1])
	if err != nil {
		fail("the log key: %v", err)
	}
	record, err := os.ReadFile(os.Args[2])
	if err != nil {
		fail("%v", err)
	}
	proofText, err := os.ReadFile(os.Args[3])
	if err != nil {
		fail("%v", err)
	}
	head, checkpoint, found := strings.Cut(string(proofText), "\n\n")
	lines := strings.Split(head, "\n")
	if !found || lines[0] != "c2sp.org/tlog-proof@v1" {
		fail("%s is not a c2sp.org/tlog-proof@v1", os.Args[3])
	}
	lines = lines[1:]
	if len(lines) > 0 && strings.HasPrefix(lines[0], "extra ") {
		extra, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(lines[0], "extra "))
		if err != nil || !bytes.Equal(extra, record) {
			fail("the proof's extra data is not %s", os.Args[2])
		}
		lines = lines[1:]
	}
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "index ") {
		fail("the proof names no index")
	}
	index, err := strconv.ParseInt(strings.TrimPrefix(lines[0], "index "), 10, 64)
	if err != nil {
		fail("the proof's index: %v", err)
	}
	var proof tlog.RecordProof
	for _, line := range lines[1:] {
		proof = append(proof, hashOf(line))
	}
	// The checkpoint's signature by the log key; other signatures (witnesses') are left unverified.
	signed, err := note.Open([]byte(checkpoint), note.VerifierList(verifier))
	if err != nil {
		fail("the checkpoint: %v", err)
	}
	fields := strings.Split(signed.Text, "\n") // origin, size, root, then optional extension lines
	if len(fields) < 4 || fields[0] != verifier.Name() {
		fail("the checkpoint is not of the log %s", verifier.Name())
	}
	size, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		fail("the checkpoint's size: %v", err)
	}
	// tlog.RecordHash is SHA-256(0x00 || record), the RFC 6962 leaf hash.
	if err := tlog.CheckRecord(proof, size, hashOf(fields[2]), index, tlog.RecordHash(record)); err != nil {
		fail("%s is not leaf %d of the tree of %d: %v", os.Args[2], index, size, err)
	}
	fmt.Printf("OK: %s is leaf %d of %s, tree of %d\n", os.Args[2], index, fields[0], size)
}
