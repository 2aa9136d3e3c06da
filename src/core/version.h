// The program's version, as a checkpoint's manifest records it (its "program" field).
#pragma once

namespace nb {

inline constexpr const char* kProgramVersion = "nobubble 0.1.0";

}  // namespace nb
