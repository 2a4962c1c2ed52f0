-- pgbench custom script: the floor of the commit pipeline (docs/benchmarks.md).
--
-- The SQL a refund execution cannot do without, as one transaction and nothing around it: lock the
-- preview, lock the order, insert the ledger row, update the order and the preview, append one audit
-- record to the hash chain (lock the chain head, insert, move the head). No broker, no worker, no ORM,
-- no gateway call. bench/run.py prepares one approved preview per transaction in bench_commit_floor
-- (n, preview_id, order_id) and runs it with as many clients as there are workers:
--
--   pgbench -n -c 2 -j 2 -t 2000 -f bench/commit_floor.sql <bench database>

SELECT nextval('bench_commit_floor_seq') AS n \gset
BEGIN;
SELECT id, status, digest, subject_version, amount_minor, currency, payload
  FROM approvals_preview WHERE id = (SELECT preview_id FROM bench_commit_floor WHERE n = :n) FOR UPDATE;
SELECT id, version, status, total_minor, refunded_minor
  FROM refunds_order WHERE id = (SELECT order_id FROM bench_commit_floor WHERE n = :n) FOR UPDATE;
INSERT INTO refunds_refund (order_id, preview_id, amount_minor, currency, reason, gateway_refund_id, created_at)
  SELECT order_id, preview_id, 500, 'EUR', 'damaged', 'floor_' || n, now() FROM bench_commit_floor WHERE n = :n;
UPDATE refunds_order SET refunded_minor = refunded_minor + 500, version = version + 1, updated_at = now()
  WHERE id = (SELECT order_id FROM bench_commit_floor WHERE n = :n);
UPDATE approvals_preview
  SET status = 'executed', executed_at = now(), status_changed_at = now(),
      result = jsonb_build_object('refund_id', 'floor_' || :n, 'amount_minor', 500, 'currency', 'EUR')
  WHERE id = (SELECT preview_id FROM bench_commit_floor WHERE n = :n);
SELECT sequence, record_hash FROM approvals_auditchainhead WHERE id = 1 FOR UPDATE;
INSERT INTO approvals_auditrecord (sequence, previous_hash, record_hash, created_at, event, action, preview_id,
                                   subject_type, subject_id, raw_arguments, approval_basis, result)
  SELECT h.sequence + 1, h.record_hash,
         encode(sha256(convert_to((h.sequence + 1)::text || h.record_hash || f.preview_id::text, 'UTF8')), 'hex'),
         now(), 'executed', 'refund_order', f.preview_id, 'order', 'PF-' || f.n, '',
         '{"customer": {"approver": 1}}', jsonb_build_object('refund_id', 'floor_' || f.n)
  FROM approvals_auditchainhead h, bench_commit_floor f WHERE h.id = 1 AND f.n = :n;
UPDATE approvals_auditchainhead
  SET sequence = sequence + 1,
      record_hash = (SELECT record_hash FROM approvals_auditrecord a WHERE a.sequence = approvals_auditchainhead.sequence + 1)
  WHERE id = 1;
COMMIT;
