# The diagnostics' tests: real launches of 2-3 ranks on this machine (CPU, Gloo, loopback), checked
# by exit code, output and time (diagnostics/expect.sh). Included from tests/CMakeLists.txt.
# No fixed port: expect.sh turns @PORT@ into a free one, so that ctest -j, and two test runs on one
# machine, run them side by side.

set(_expect "${PROJECT_SOURCE_DIR}/diagnostics/expect.sh")

# The preflight checks that need no network or GPU (plain C++, no LibTorch: builds in seconds).
add_executable(diagnostics_tests ${PROJECT_SOURCE_DIR}/diagnostics/test_preflight.cpp)
target_link_libraries(diagnostics_tests PRIVATE diagnostics_preflight GTest::gtest_main ddpw_warnings)
gtest_discover_tests(diagnostics_tests TEST_PREFIX "diagnostics.preflight." PROPERTIES LABELS unit
                     ENVIRONMENT "${DDPW_CPU_ONLY_ENV}" ENVIRONMENT_MODIFICATION "${DDPW_WAITS_SLEEP}")

find_program(DDPW_MPIRUN mpirun)
find_program(DDPW_TORCHRUN torchrun HINTS "$ENV{HOME}/.cache/ddp-workshop/venv/bin")
if(NOT DDPW_MPIRUN)
  message(WARNING "mpirun was not found: the diagnostics' mpirun tests are NOT registered "
                  "(apt-get install openmpi-bin, or module load openmpi)")
endif()
if(NOT DDPW_TORCHRUN)
  message(WARNING "torchrun was not found: the diagnostics' torchrun test is NOT registered "
                  "(run scripts/setup.sh, or put a torch environment's bin on PATH)")
endif()

# A lone rank 1 whose master never listens: fails within the rendezvous timeout (3 s), having
# retried for it, and names host:port.
add_test(NAME diagnostics.hello.master_not_listening
  COMMAND "${_expect}" --exit 1 --within 20
          -e "could not reach the master 127\\.0\\.0\\.1:@PORT@ within 3\\.[0-9] s: Connection refused"
          -- env RANK=1 WORLD_SIZE=2 $<TARGET_FILE:hello> --device cpu
             --master-addr 127.0.0.1 --master-port @PORT@ --rendezvous-timeout 3)

# A master name that cannot exist (.invalid, RFC 6761): fails at once, naming it. On a host whose
# name server does not answer (EAI_AGAIN: it may come back) it fails when the rendezvous timeout
# ends, naming the same cause.
add_test(NAME diagnostics.hello.master_unresolvable
  COMMAND "${_expect}" --exit 1 --within 60
          -e "no-such-host\\.invalid:@PORT@(: | within [0-9.]+ s: )cannot resolve the host name"
          -- env RANK=1 WORLD_SIZE=2 $<TARGET_FILE:hello> --device cpu
             --master-addr no-such-host.invalid --master-port @PORT@ --rendezvous-timeout 10)

# Rank 0 given a MASTER_ADDR that is not this host's (TEST-NET-1, RFC 5737) fails at once, before
# any connection is tried; in a network namespace of its own with the guard route, so that even a
# regression could not send a packet off this machine. Skipped where `ip` (iproute2) is missing.
find_program(DDPW_UNSHARE unshare)
if(DDPW_UNSHARE)
  add_test(NAME diagnostics.hello.master_not_this_host
    COMMAND "${_expect}" --exit 1 --within 20 --needs ip
            -e "MASTER_ADDR 192\\.0\\.2\\.1 is not an address of this host"
            -- "${DDPW_UNSHARE}" --net sh -c
               "ip link set lo up && ip route add unreachable 10.77.0.0/16 && exec \"$0\" \"$@\""
               env RANK=0 WORLD_SIZE=2 $<TARGET_FILE:hello> --device cpu
               --master-addr 192.0.2.1 --master-port @PORT@ --rendezvous-timeout 3)
  # A name server that gives no answer (EAI_AGAIN), as in a network namespace with no interface up:
  # retried until the rendezvous timeout, then the fix is an IP address, not a firewall.
  add_test(NAME diagnostics.hello.master_lookup_unanswered
    COMMAND "${_expect}" --exit 1 --within 20
            -e "no-such-host\\.invalid:@PORT@ within 2\\.[0-9] s: cannot resolve the host name"
            -e "fix: the name server gave no answer for that name: set MASTER_ADDR .* to rank 0's IP address"
            -- "${DDPW_UNSHARE}" --net env RANK=1 WORLD_SIZE=2 $<TARGET_FILE:hello> --device cpu
               --master-addr no-such-host.invalid --master-port @PORT@ --rendezvous-timeout 2)
endif()

# Bad sweep options are usage errors (exit 2), before any rank starts communicating.
add_test(NAME diagnostics.allreduce_check.bad_size
  COMMAND "${_expect}" --exit 2 --within 20 -e "multiples of 4 B"
          -- $<TARGET_FILE:allreduce_check> --device cpu --min-bytes 6)

if(DDPW_MPIRUN)
  set(_mpirun "${DDPW_MPIRUN}" --allow-run-as-root --oversubscribe)

  add_test(NAME diagnostics.hello.mpirun_2_ranks
    COMMAND "${_expect}" --exit 0 --within 60
            -e "^# hello: openmpi: rank 0 of 2"
            -e "^0 +[^ ]+ +0 of 2 +[0-9]+ +cpu "
            -e "^1 +[^ ]+ +1 of 2 +[0-9]+ +cpu "
            -e "^#   NCCL_DEBUG=INFO \\(all ranks\\)$"
            -e "^# joined the gloo backend in [0-9.]+ s$"
            -e "^# DDP check: Linear\\(42,3\\).* on 2 rank\\(s\\): same output on every rank .*: OK$"
            -e "^OK: 2 of 2 ranks reported$"
            -- ${_mpirun} -np 2 -x NCCL_DEBUG=INFO
               $<TARGET_FILE:hello> --device cpu --master-addr 127.0.0.1 --master-port @PORT@)

  # Rendezvous through a file instead of a TCP store (a stale file would hold old keys: removed first).
  set(_rdzv "${CMAKE_CURRENT_BINARY_DIR}/diagnostics-hello.rdzv")
  add_test(NAME diagnostics.hello.file_rendezvous
    COMMAND "${_expect}" --exit 0 --within 60
            -e "^# hello: openmpi: rank 0 of 2, .*init file://"
            -e "^OK: 2 of 2 ranks reported$"
            -- sh -c "rm -f \"$0\" && exec \"$@\"" "${_rdzv}"
               ${_mpirun} -np 2 $<TARGET_FILE:hello> --device cpu --init-method "file://${_rdzv}")

  # Both ranks claim local rank 0 (a launch bug): every rank reports, and the run fails naming it,
  # before joining the backend.
  add_test(NAME diagnostics.hello.duplicate_local_rank
    COMMAND "${_expect}" --exit 1 --within 60
            -e "^# FAILED: ranks 0-1 both claim .*local rank 0 of 2"
            -e "^FAILED: 2 of 2 ranks reported$"
            -- ${_mpirun} -np 2 sh -c
               "RANK=$OMPI_COMM_WORLD_RANK WORLD_SIZE=2 LOCAL_RANK=0 exec \"$0\" --device cpu --master-addr 127.0.0.1 --master-port @PORT@"
               $<TARGET_FILE:hello>)

  add_test(NAME diagnostics.allreduce_check.mpirun_2_ranks
    COMMAND "${_expect}" --exit 0 --within 120
            -e "^# LibTorch .*, backend gloo"
            -e "^ +8 +2 +float +sum +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$"
            -e "^ +4194304 +1048576 +float +sum +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$"
            -e "^# Out of bounds values : 0 OK$"
            -e "^# memcpy bandwidth +: [0-9.]+ GB/s"
            -e "^OK$"
            -- ${_mpirun} -np 2 $<TARGET_FILE:allreduce_check> --device cpu --max-bytes 4M --iters 5 --warmup 2
               --master-addr 127.0.0.1 --master-port @PORT@)

  # Three ranks: an odd world size for the pattern and the 2(n-1)/n bus factor.
  add_test(NAME diagnostics.allreduce_check.mpirun_3_ranks
    COMMAND "${_expect}" --exit 0 --within 120
            -e "n = 3"
            -e "^ +1048576 +262144 +float +sum +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$"
            -e "^OK$"
            -- ${_mpirun} -np 3 $<TARGET_FILE:allreduce_check> --device cpu --min-bytes 16 --factor 4 --max-bytes 1M --iters 3
               --warmup 1 --master-addr 127.0.0.1 --master-port @PORT@)
endif()

if(DDPW_TORCHRUN)
  # torchrun picks a free port itself (--standalone).
  add_test(NAME diagnostics.hello.torchrun_2_ranks
    COMMAND "${_expect}" --exit 0 --within 90
            -e "^# hello: torchrun: rank 0 of 2"
            -e "^1 +[^ ]+ +1 of 2 +[0-9]+ +cpu "
            -e "^# DDP check: .*: OK$"
            -e "^OK: 2 of 2 ranks reported$"
            -- "${DDPW_TORCHRUN}" --standalone --nproc_per_node=2 --no-python $<TARGET_FILE:hello> --device cpu)
endif()

# On the CPU even on a GPU host (DDPW_CPU_ONLY_ENV, tests/CMakeLists.txt); the GPU cases of hello
# are gpu tests (tests/test_gpu.cpp).
get_property(_diagnostics_tests DIRECTORY PROPERTY TESTS)
list(FILTER _diagnostics_tests INCLUDE REGEX "^diagnostics\\.")
set_tests_properties(${_diagnostics_tests} PROPERTIES LABELS integration TIMEOUT 180 ENVIRONMENT "${DDPW_CPU_ONLY_ENV}"
                     SKIP_RETURN_CODE 77)
