// The one-shot GPU forward: a forward session used once, eagerly (see forward_session_cuda.h).
// Sampling loops keep a session instead, so the per-request work is done once.
#include "model/forward_session_cuda.h"
#include "model/model_cuda.h"

namespace h3rt::model {

ForwardOutputs forward_cuda(const DeviceModel& model, const ForwardInputs& inputs) {
  ForwardSessionOptions o;
  o.cuda_graph = false;
  ForwardSessionCuda session(model, inputs.layout, o);
  return session.forward(inputs);
}

}  // namespace h3rt::model
