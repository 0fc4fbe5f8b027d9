// Where a launcher's job token comes from (never argv: /proc/<pid>/cmdline is world-readable).
//
//  - One node: a fresh random token per job (an inherited CHORUS_JOB_TOKEN is ignored, since it
//    belongs to an enclosing job), unless --token-file is given.
//  - Several nodes: every launcher needs the same token, from --token-stdin (the -H coordinator
//    writes it to the remote launcher's stdin over ssh), else --token-file / CHORUS_JOB_TOKEN_FILE
//    (a file that group and others cannot read, e.g. mode 0600), else CHORUS_JOB_TOKEN. With
//    none of these a multi-node launcher refuses to start, saying how to pass one: a token that
//    only node 0 knew would have to be copied by hand anyway.
//  - The -H coordinator: --token-file, else CHORUS_JOB_TOKEN, else a fresh random token.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "options.h"

namespace chorus::launcher {

// Reads the token from the first line of `path` (surrounding whitespace removed). Refuses (with
// chorus::InvalidArgumentError) a file that group or others can read or write, or an empty one.
std::string readTokenFile(const std::string& path);

// Reads one line from stdin within `timeout` (InvalidArgumentError at EOF or on timeout).
std::string readTokenFromStdin(std::chrono::milliseconds timeout);

// The token this launcher uses, following the rules above; std::nullopt when a multi-node
// launcher has none.
std::optional<std::string> findJobToken(const LaunchOptions& options);

// The message for a multi-node launcher without a token.
std::string missingTokenMessage();

}  // namespace chorus::launcher
