"""What the tests share: small models, the bad-input fuzzer, the table of public classes, paths."""
