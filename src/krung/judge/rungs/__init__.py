"""One module per rung. Each defines `NEEDS` (rungs that must not have failed) and
`run(ctx) -> figures`, raising krung.protocol.errors.RungFailed to fail with the facts and the fix."""
