"""Exit statuses of every `diagnosd` command (listed in `diagnosd --help`)."""

EXIT_OK, EXIT_RULES, EXIT_USAGE, EXIT_SOURCE = 0, 1, 2, 3
# triage / watch: at least one symptom is present.
EXIT_FOUND = 4
EXIT_INTERRUPTED = 130
# The reader of standard output went away (`diagnosd ... | head`): 128 + SIGPIPE, what a shell
# reports for any tool a closed pipe stopped, so that `set -o pipefail` sees the output was cut.
EXIT_PIPE = 141
