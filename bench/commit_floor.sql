-- pgbench custom script: the floor of the commit pipeline (docs/benchmarks.md).
--
-- The SQL a refund execution cannot do without, as one transaction and nothing around it: lock the
-- preview, lock the order, insert the ledger row, update the order and the preview, append one audit
-- record (a plain insert, as the gateway does: the sealer adds it to the Merkle tree later, outside the
-- transaction). No broker, no worker, no ORM, no gateway call. bench/run.py prepares one approved preview per transaction in bench_commit_floor
-- (n, preview_id, order_id) and runs it with as many clients as there are workers:
--
--   pgbench -n -c 2 -j 2 -t 2000 -f bench/commit_floor.sql <bench database>

SELECT nextval('bench_commit_floor_seq') AS n \gset
BEGIN;
SELECT id, status, digest, subject_version, amount_minor, currency, payload
  FROM approvals_preview WHERE id = (SELECT preview_id FROM bench_commit_floor WHERE n = :n) FOR UPDATE;
SELECT id, version, status, total_minor, refunded_minor
  FROM refunds_order WHERE id = (SELECT order_id FROM bench_commit_floor WHERE n = :n) FOR UPDATE;
INSERT INTO refunds_refund (order_id, preview_id, amount_minor, currency, reason, gateway_refund_id, created_at,
                            status, status_reason)
  SELECT order_id, preview_id, 500, 'EUR', 'damaged', 'floor_' || n, now(), 'succeeded', ''
  FROM bench_commit_floor WHERE n = :n;
UPDATE refunds_order SET refunded_minor = refunded_minor + 500, version = version + 1, updated_at = now()
  WHERE id = (SELECT order_id FROM bench_commit_floor WHERE n = :n);
UPDATE approvals_preview
  SET status = 'executed', executed_at = now(), status_changed_at = now(),
      result = jsonb_build_object('refund_id', 'floor_' || :n, 'amount_minor', 500, 'currency', 'EUR')
  WHERE id = (SELECT preview_id FROM bench_commit_floor WHERE n = :n);
INSERT INTO approvals_auditrecord (created_at, transaction_id, event, action, preview_id, subject_type, subject_id,
                                   raw_arguments, approval_basis, result)
  SELECT now(), pg_current_xact_id()::text::bigint, 'executed', 'refund_order', f.preview_id, 'order', 'PF-' || f.n, '',
         '{"customer": {"approver": 1}}', jsonb_build_object('refund_id', 'floor_' || f.n)
  FROM bench_commit_floor f WHERE f.n = :n;
COMMIT;
