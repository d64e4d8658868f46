#pragma once
// The `tessera` command line: verbs, options, exit codes. tools/cli/main.cpp is a thin shell
// around cli_main.
//
// Exit codes: 0 success; 1 the run finished but a check failed; 2 bad input or usage;
// 3 internal error; 130 interrupted (SIGINT).
namespace tessera::sim {

enum ExitCode { kExitOk = 0, kExitCheckFailed = 1, kExitBadInput = 2, kExitInternal = 3, kExitInterrupted = 130 };

int cli_main(int argc, char** argv);

}  // namespace tessera::sim
