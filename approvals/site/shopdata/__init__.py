"""The shop data API (`/api/shop/…`, docs/shop-data.md): the shop's own system keeps the gateway's orders,
invoices and customers current one record at a time, in the item format of `import_shop_data`.

`tokens` mints, finds and revokes its service tokens (stored hashed); `services` reads and writes one
record (validation, If-Match, Idempotency-Key, audit); `authentication`, `views`, `serializers` and
`urls` are the thin web layer; `console` is the staff page listing the tokens."""
