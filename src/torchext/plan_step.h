// Planning without running: mutwo's planner on a graph someone else will run.
// mutwo.torch's Inductor route (python/mutwo/_inductor.py) hands it the joint
// graph AOTAutograd gives Inductor's partitioner, written as a step file whose
// tensors are fake, with each node's cost as Inductor will run it (fused or
// not); it answers which forward values to keep and which to recompute. A
// byte budget is on the bytes the step adds to what it is given (its
// parameters, buffers and inputs), as mutwo.torch measures a compiled step; a
// percentage means what it means everywhere (docs/budgets.md).
#pragma once

#include <string>

namespace mutwo::torchext {

// `options_json`: {"budget": null | "60%" | "2GiB" | "lowest" | <bytes>,
// "planner": "mutwo", "device": "cpu" | "cuda", "fused": [first output's name
// of each node the compiler fuses into its neighbours], "unmaterialized":
// [values it never writes to memory]}. Returns the plan as JSON
// (docs/python.md, "The compiled route"). Throws BudgetError (session.h) when
// no plan fits, naming the lowest peak.
std::string plan_step(const std::string& step_json, const std::string& options_json);

}  // namespace mutwo::torchext
