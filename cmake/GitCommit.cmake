# The commit `trainer version` prints: cmake -DSOURCE_DIR=<tree> -DOUT=<header> -P GitCommit.cmake
# writes `#define TRAINER_GIT_COMMIT "<commit>"` to OUT: the commit checked out
# in SOURCE_DIR, with "-dirty" when tracked files differ from it, or "unknown"
# where SOURCE_DIR is no git checkout of its own (a source tarball) or git is
# missing. The build runs it every time (CMakeLists.txt, target
# trainer_git_commit); OUT is rewritten only when its text changes, so a build
# recompiles runner/commands/version.cpp only after the commit (or the dirty
# state) changed, and never reconfigures for it.
set(commit "unknown")
find_program(GIT_EXECUTABLE git)
if(GIT_EXECUTABLE AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" rev-parse HEAD
                  OUTPUT_VARIABLE head RESULT_VARIABLE head_failed
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT head_failed AND head MATCHES "^[0-9a-f]+$")
    set(commit "${head}")
    # --no-optional-locks: never hold the index lock a concurrent git command needs.
    execute_process(COMMAND "${GIT_EXECUTABLE}" --no-optional-locks -C "${SOURCE_DIR}"
                            status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE changes RESULT_VARIABLE status_failed ERROR_QUIET)
    if(NOT status_failed AND NOT changes STREQUAL "")
      string(APPEND commit "-dirty")
    endif()
  endif()
endif()
set(text "#define TRAINER_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
