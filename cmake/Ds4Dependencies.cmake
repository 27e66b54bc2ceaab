# Third-party libraries, all from Debian 12 (bookworm) packages; scripts/install-deps.sh installs them.
# Versions are pinned to bookworm's (the project's list: ../shared/docs/dependencies.md); a mismatch is a configure error.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(fmt 9.1 REQUIRED)
find_package(nlohmann_json 3.11.2 REQUIRED)
find_package(CLI11 2.1 REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8>=10.42)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd>=1.5.4)
pkg_check_modules(EDIT REQUIRED IMPORTED_TARGET libedit>=3.1)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib>=0.11.4)
find_package(OpenSSL 3.0 REQUIRED COMPONENTS Crypto)
if(DS4_TESTS)
  find_package(GTest 1.12 REQUIRED)
endif()
if(DS4_BENCH)
  find_package(benchmark 1.7 REQUIRED)
endif()

# The shared test data folder (../shared beside the checkout); without it the tokenizer corpus
# tests skip and the chat-encoding golden and parity tests fail ("cannot open").
get_filename_component(_ds4_shared "${PROJECT_SOURCE_DIR}/../shared" ABSOLUTE)
set(DS4_SHARED_DIR "${_ds4_shared}" CACHE PATH "Shared docs and test data")
