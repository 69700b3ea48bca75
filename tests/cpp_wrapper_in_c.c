/* Must not compile: a C translation unit that includes the C++ wrapper gets its #error, not a
 * cascade of syntax errors (tests/CMakeLists.txt expects the message). */
#include "streamattn/streamattn.hpp"

int main(void) { return 0; }
