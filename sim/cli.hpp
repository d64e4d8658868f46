#pragma once
// The `tessera` command line: verbs, options, exit codes. tools/cli/main.cpp is a thin shell
// around cli_main.
//
// Exit codes: 0 success; 1 the run finished but a check failed; 2 bad input, usage or environment
// (a path that cannot be written, memory); 3 internal error (a bug); 130 interrupted (SIGINT),
// 143 terminated (SIGTERM), both after the same cleanup.
namespace tessera::sim {

enum ExitCode { kExitOk = 0, kExitCheckFailed = 1, kExitBadInput = 2, kExitInternal = 3, kExitInterrupted = 130, kExitTerminated = 143 };

int cli_main(int argc, char** argv);

}  // namespace tessera::sim
