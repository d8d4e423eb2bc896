"""Site checks: executables an operator drops into a configured directory (`site_checks.dir`),
run as checks like any other, the way node-problem-detector's custom plugin monitor runs its
plugins (exit 0 OK, 1 NonOK, anything else Unknown; a timeout per plugin; the output as the
message). `loader` discovers and vets the files and builds the Checks; `outcome` runs one and
reads its answer. docs/site-checks.md is the contract."""
