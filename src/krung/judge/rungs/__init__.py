"""One module (or package) per rung. Each declares `SPEC` (krung.judge.rungs.spec.RungSpec:
its name, order, needs and every figure it reports) and defines `run(ctx) -> figures`, raising
krung.protocol.errors.RungFailed to fail with the facts and the fix. The ladder finds them
here by their declarations (krung.judge.ladder)."""
