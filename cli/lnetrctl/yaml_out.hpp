// lnetrctl's output: a management-API document printed as lnetctl prints
// YAML (block style, lnetctl's indentation, keys in the document's order,
// scalars quoted only where YAML would read them as something else).
// Reading the text back gives the same document (fuzzed), for keys up to
// YAML's 1024-character limit on implicit keys.
#pragma once

#include <string>

#include "control/request.hpp"

namespace lnetr::lnetrctl {

using Json = control::Json;

std::string to_yaml(const Json& doc);

// A scalar as YAML text: plain if YAML reads it back as the same string,
// else double-quoted.
std::string yaml_scalar(const Json& v);

}  // namespace lnetr::lnetrctl
