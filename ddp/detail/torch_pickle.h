// defines: nothing of its own — TensorDict and tensor_dict_to_bytes/_from_bytes are public API in
//          ddp/torch_pickle.h (they lived here for a while); include that. Kept so that code that
//          includes this path still compiles.
#pragma once

#include "ddp/torch_pickle.h"  // defines: TensorDict, tensor_dict_to_bytes, tensor_dict_from_bytes
