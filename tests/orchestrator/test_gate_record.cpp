// A gate verdict as the run keeps it (orchestrator/gate_record.h): read once and strictly, from every kind of
// record the run holds; a record that does not read is not resumed, and the run says why.
#include <gtest/gtest.h>

#include <fstream>

#include "orchestrator/gate_record.h"
#include "run_state_fixture.h"

using namespace autooptim;
using namespace autooptim::orchestrator;
using nlohmann::json;
using orchestrator::testing::RunStateTest;
using orchestrator::testing::verdict;

namespace {

std::string read_error(const json& row) {
  try {
    GateRecord::read(row, "ledger row 3");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(GateRecord, AVerdictReadsWithItsChecksAndKeepsItsRow) {
  json v = verdict(false, 1.7, 31, "quality", "abc", "val");
  v["baseline_seconds"] = 2.0;
  v["candidate_seconds"] = 1.2;
  v["gates"]["performance"] = {{"pass", true}, {"reason", ""}, {"details", {{"noise", 0.02}}}};
  v["worker"] = "cpu0";
  const GateRecord r = GateRecord::read(v, "verdict");
  EXPECT_EQ(r.manifest_hash, "abc");
  EXPECT_EQ(r.split, "val");
  EXPECT_FALSE(r.accepted);
  EXPECT_DOUBLE_EQ(r.speedup, 1.7);
  EXPECT_DOUBLE_EQ(r.psnr, 31);
  EXPECT_DOUBLE_EQ(r.baseline_seconds, 2.0);
  EXPECT_DOUBLE_EQ(r.candidate_seconds, 1.2);
  EXPECT_EQ(r.failure_signature, "quality");
  EXPECT_FALSE(r.passed("quality"));
  EXPECT_TRUE(r.passed("performance"));
  EXPECT_FALSE(r.passed("visual"));  // no such check in the record
  EXPECT_EQ(r.gates.at("quality").reason, "quality failed");
  EXPECT_EQ(r.performance_details(), json({{"noise", 0.02}}));
  EXPECT_FALSE(r.survived_reduced());
  EXPECT_EQ(r.row, v);
}

// A could-not-run record has no seconds: it reads, at 0.
TEST(GateRecord, ACouldNotRunRecordReadsWithoutSeconds) {
  json v = verdict(false, 0, 0, "artifacts", "abc", "val");
  v["failure_signature"] = "could-not-run";
  const GateRecord r = GateRecord::read(v, "verdict");
  EXPECT_DOUBLE_EQ(r.baseline_seconds, 0);
  EXPECT_EQ(r.failure_signature, "could-not-run");
  EXPECT_TRUE(r.performance_details().empty());
}

// A missing or mistyped key is an error naming it and the record, never a silent 0.
TEST(GateRecord, AMissingOrMistypedKeyIsAnErrorNamingIt) {
  json v = verdict(true, 2.0, 40);
  v.erase("speedup");
  EXPECT_EQ(read_error(v), "ledger row 3: missing key 'speedup'");
  v = verdict(true, 2.0, 40);
  v["accepted"] = "yes";
  EXPECT_NE(read_error(v).find("ledger row 3: key 'accepted'"), std::string::npos) << read_error(v);
  v = verdict(true, 2.0, 40);
  v["gates"]["quality"] = {{"reason", "no pass key"}};
  EXPECT_EQ(read_error(v), "ledger row 3: gates.quality: missing key 'pass'");
  EXPECT_NE(read_error(json::array()), "");
  EXPECT_EQ(read_error(verdict(true, 2.0, 40)), "");
}

// Resume: the ledger's rows in this environment become the run's verdicts; a row that does not read is
// not resumed (its manifest is gated again) and a warning names it.
TEST_F(RunStateTest, AResumedLedgerRowThatDoesNotReadIsGatedAgainWithAWarning) {
  auto& s = state();
  json good = verdict(true, 2.0, 40, "", "h1", "val");
  json bad = verdict(true, 3.0, 40, "", "h2", "val");
  bad.erase("psnr");
  const json env = gate_environment_of(s.first_worker);  // named: items() of a temporary would dangle
  for (json* row : {&good, &bad})
    for (const auto& [k, v] : env.items()) (*row)[k] = v;
  {
    std::ofstream f(dir_ / "ledger.jsonl");
    f << good.dump() << "\n" << bad.dump() << "\n";
  }
  s.ledger.emplace((dir_ / "ledger.jsonl").string());
  ::testing::internal::CaptureStderr();
  resume_verdicts(s);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(s.done.size(), 1u);
  EXPECT_DOUBLE_EQ(s.done.at({"h1", "val"}).speedup, 2.0);
  EXPECT_NE(err.find("ledger row 2: missing key 'psnr': not resumed"), std::string::npos) << err;
}
