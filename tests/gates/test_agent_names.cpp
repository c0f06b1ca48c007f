// The agent naming convention (gates/agent_names.h) that the executor host writes under and the
// orchestrator reads by: names round-trip, an agent's proposals are told from a built-in searcher's.
#include <gtest/gtest.h>

#include <string>

#include "gates/agent_names.h"

using namespace autooptim::gates;

TEST(AgentNames, AFamilysExecutorNameRoundTrips) {
  EXPECT_EQ(agent_executor_name("cache"), "agent-cache");
  for (const std::string f : {"kernel", "cache", "sparse", "quant", "vae"}) {
    const std::string name = agent_executor_name(f);
    EXPECT_TRUE(is_agent_executor(name)) << name;
    EXPECT_EQ(agent_family_of(name), f);
  }
}

TEST(AgentNames, ABuiltInSearcherIsNoAgent) {
  for (const std::string name : {"cache", "kernel", "quant", "sparse", "", "agent", "my-agent-cache"}) {
    EXPECT_FALSE(is_agent_executor(name)) << name;
    EXPECT_EQ(agent_family_of(name), "") << name;
  }
}

TEST(AgentNames, AnAgentsProposalsAreToldByTheirId) {
  EXPECT_EQ(agent_proposal_prefix("vae"), "agent-vae-");
  // As the executor host writes it: MODEL/<manifest family>/<prefix><slug>.
  const std::string vae = "wan22-tiny/" + agent_manifest_family("vae") + "/" + agent_proposal_prefix("vae") + "tile";
  EXPECT_EQ(vae, "wan22-tiny/kernel/agent-vae-tile");
  EXPECT_TRUE(is_agent_proposal(vae));
  EXPECT_TRUE(is_proposal_of_agent(vae, "vae"));
  EXPECT_FALSE(is_proposal_of_agent(vae, "kernel"));
  EXPECT_FALSE(is_proposal_of_agent("wan22-tiny/cache/agent-cache-x", "vae"));
  for (const std::string id :
       {"wan22-tiny/kernel/fused_norm", "wan22-tiny/cache/teacache-0.1", "wan22-tiny/baseline"}) {
    EXPECT_FALSE(is_agent_proposal(id)) << id;
    EXPECT_FALSE(is_proposal_of_agent(id, "cache")) << id;
  }
}

TEST(AgentNames, TheVaeAgentProposesKernelManifests) {
  EXPECT_EQ(agent_manifest_family("vae"), "kernel");
  for (const std::string f : {"kernel", "cache", "sparse", "quant"}) EXPECT_EQ(agent_manifest_family(f), f);
}

TEST(AgentNames, AnAgentTakesTurnsOfItsOwnInTheRoundRobin) {
  EXPECT_EQ(proposal_source("kernel", "wan22-tiny/kernel/agent-vae-tile"), "kernel:agent");
  EXPECT_EQ(proposal_source("cache", "wan22-tiny/cache/agent-cache-p1"), "cache:agent");
  EXPECT_EQ(proposal_source("cache", "wan22-tiny/cache/teacache-0.1"), "cache");
}

TEST(AgentNames, AHandedOverPluginIsKeptByItsSha256InItsAgentsOutbox) {
  const std::string sha(64, 'a');
  EXPECT_EQ(agent_plugins_dir("/run/outbox/agent-cache"), "/run/outbox/agent-cache/plugins");
  EXPECT_EQ(agent_plugin_file("/run/outbox/agent-cache", sha), "/run/outbox/agent-cache/plugins/" + sha + ".so");
}
