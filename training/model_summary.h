// model.summary(): Keras' table (layer, output shape, params) and, under a distribution, the
// plan — each variable's layout, its local shape and bytes per process, the parameter bytes per
// process, and the collectives of the last training step by kind and mesh axis — with what
// looks wrong: LayoutMap keys that matched nothing, layers that gather their input every step.
// Silent mis-sharding is the complaint Keras users raise most about ModelParallel; this is the
// place where it stops being silent.
#pragma once
#include <string>
#include <vector>

#include "distribution/runtime/collective_log.h"

namespace keras {

class Model;

std::string summary_text(Model& model, const std::vector<distribution::CollectiveTotal>& last_step);

// The warnings of the plan (empty when there are none), one per line.
std::vector<std::string> plan_warnings(Model& model);

}  // namespace keras
