# The guard rails (label unit): the C++ files match .clang-format, every shell script passes
# shellcheck. Each skips (exit 77) when its tool is missing. Included from tests/CMakeLists.txt.
foreach(check format shellcheck layers)
  add_test(NAME lint.${check} COMMAND bash "${CMAKE_CURRENT_LIST_DIR}/${check}.sh")
  set_tests_properties(lint.${check} PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "DDPW_ROOT=${PROJECT_SOURCE_DIR};${DDPW_CPU_ONLY_ENV}")
endforeach()
# Every module name of clusters/<site>/env.sh and every #SBATCH partition, GPU request, QoS,
# constraint, reservation and account of its scripts has a row in clusters/<site>/SOURCES.md, each
# row a source page and the date read, or *unconfirmed* and the command that confirms it.
add_test(NAME lint.site_sources COMMAND python3 "${CMAKE_CURRENT_LIST_DIR}/site_sources.py" "${PROJECT_SOURCE_DIR}")
set_tests_properties(lint.site_sources PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT "${DDPW_CPU_ONLY_ENV}")
# No include cycle among the library's modules (a header and its source together), after proving it
# catches a planted one (include_cycles.py).
add_test(NAME lint.include_cycles COMMAND python3 "${CMAKE_CURRENT_LIST_DIR}/include_cycles.py" "${PROJECT_SOURCE_DIR}")
set_tests_properties(lint.include_cycles PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT "${DDPW_CPU_ONLY_ENV}")
# Every tensor literal handed to a collective names a device (NCCL refuses CPU tensors; a CPU machine
# cannot show it), after proving it catches a planted one (collective_devices.py).
add_test(NAME lint.collective_devices COMMAND python3 "${CMAKE_CURRENT_LIST_DIR}/collective_devices.py" "${PROJECT_SOURCE_DIR}")
set_tests_properties(lint.collective_devices PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT "${DDPW_CPU_ONLY_ENV}")
# The headers the pages name exist, and none of ddp/detail/ is shown as one to include; every ddp:: name
# they name is declared in a public header (a program written from the pages needs no internal one).
add_test(NAME lint.page_headers COMMAND python3 "${CMAKE_CURRENT_LIST_DIR}/page_headers.py" "${PROJECT_SOURCE_DIR}")
set_tests_properties(lint.page_headers PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT "${DDPW_CPU_ONLY_ENV}")
