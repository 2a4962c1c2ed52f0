"""A test-only action, `rename_board(board_id, title)`, on which the engine's own tests run (tests/engine/).

No money, a browser confirmation by the board's owner, staff review for titles with a review word, and an
effect with no outside world. It imports only `approvals.plugin`, like any action app.
"""
