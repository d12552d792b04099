# The guard rails (label unit): the C++ files match .clang-format, every shell script passes
# shellcheck. Each skips (exit 77) when its tool is missing. Included from tests/CMakeLists.txt.
foreach(check format shellcheck layers)
  add_test(NAME lint.${check} COMMAND bash "${CMAKE_CURRENT_LIST_DIR}/${check}.sh")
  set_tests_properties(lint.${check} PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "DDPW_ROOT=${PROJECT_SOURCE_DIR};${DDPW_CPU_ONLY_ENV}")
endforeach()
