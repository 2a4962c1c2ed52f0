"""`python -m chaos [--short] [--seed N]`: the fault campaign; exits 1 when an invariant fails."""

import argparse
import sys

from chaos.campaign import Campaign, Plan


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--short", action="store_true", help="each fault once (what `make test` runs)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    plan = Plan.short(args.seed) if args.short else Plan.full(args.seed)
    return Campaign(plan, out=lambda line: print(line, flush=True)).run()


if __name__ == "__main__":
    sys.exit(main())
