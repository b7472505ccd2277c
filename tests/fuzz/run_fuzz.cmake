# One CI-sized fuzz run: FUZZER for RUNS executions (seed 1, dictionary DICT) from the committed
# CORPUS; inputs it finds go to WORK/new (never into the source tree), a crashing input to
# WORK/artifacts.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/new" "${WORK}/artifacts")
execute_process(COMMAND "${FUZZER}" -runs=${RUNS} -seed=1 -print_final_stats=1 "-dict=${DICT}"
                        "-artifact_prefix=${WORK}/artifacts/" "${WORK}/new" "${CORPUS}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER}: exit ${rc}; the input that failed is in ${WORK}/artifacts")
endif()
