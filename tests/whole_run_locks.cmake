# Read by ctest after the gtest discovery scripts (TEST_INCLUDE_FILES, in order): a discovered gtest that is a
# whole `autooptim run` joins the lock of the agent scripts' whole runs (tests/CMakeLists.txt). Beside
# agents_run on two cores it made that run's trials ten times slower and the exploration deadline stopped
# its executors; under the lock the two never share the machine. ctest ignores a name it does not know here
# (and its if(TEST) does not see discovered tests): the ctest whole_run_locks checks that each name below is
# a test that holds the lock.
set_tests_properties("Cli.RunOnTheTinyModelWritesEveryReportAndResumes" PROPERTIES RESOURCE_LOCK agent_whole_runs)
set_tests_properties("Cli.RunOnTheTinyMoeGatesItsCandidates" PROPERTIES RESOURCE_LOCK agent_whole_runs)
