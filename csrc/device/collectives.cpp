// The runtime's optional collectives (runtime.h minor 1, and minor 2's token bootstrap), as sdk/device/distributed.py calls them: a
// communicator per process group and device, collectives enqueued on torch's current stream.
#include "tv_device.h"

#include <c10/core/ScalarType.h>

namespace torchvendor {

// The runtime's tv_dtype for `t`; false where it has none (the fast path in process_group.cpp
// then hands the call to the Python group, which names the supported types).
bool tv_dtype_for(c10::ScalarType t, tv_dtype* out) {
  switch (t) {
    case c10::ScalarType::Float: *out = TV_FLOAT32; return true;
    case c10::ScalarType::Double: *out = TV_FLOAT64; return true;
    case c10::ScalarType::Half: *out = TV_FLOAT16; return true;
    case c10::ScalarType::BFloat16: *out = TV_BFLOAT16; return true;
    case c10::ScalarType::Char: *out = TV_INT8; return true;
    case c10::ScalarType::Byte: *out = TV_UINT8; return true;
    case c10::ScalarType::Int: *out = TV_INT32; return true;
    case c10::ScalarType::Long: *out = TV_INT64; return true;
    case c10::ScalarType::Bool: *out = TV_BOOL; return true;
    default: return false;
  }
}

namespace {

tv_dtype to_tv_dtype(c10::ScalarType t) {
  tv_dtype out = TV_FLOAT32;
  TORCH_CHECK_TYPE(tv_dtype_for(t, &out), "the runtime's collectives have no type for ", t,
                   " (tv_dtype covers float32/64, float16, bfloat16, int8, uint8, int32, int64, "
                   "bool); cast the tensor first.");
  return out;
}

}  // namespace

bool has_token_bootstrap() {
  return rt().comm_token && rt().comm_create_from_token;
}

bool has_collectives() {
  const tv_runtime& t = rt();
  return (t.comm_create || has_token_bootstrap()) && t.comm_destroy && t.all_reduce &&
         t.broadcast && t.all_gather && t.reduce_scatter && t.send && t.recv;
}

namespace {
void check_collectives() {
  TORCH_CHECK_NOT_IMPLEMENTED(has_collectives(), "the ", backend_name(), " runtime '",
                              runtime_info().name, "' provides no collectives (runtime.h minor 1"
                              " entries comm_create ... recv); they are staged over gloo instead.");
}
}  // namespace

uintptr_t comm_create(const std::string& id, int nranks, int rank, c10::DeviceIndex device) {
  check_collectives();
  TORCH_CHECK_NOT_IMPLEMENTED(rt().comm_create, "the ", backend_name(), " runtime '",
                              runtime_info().name, "' joins communicators only from a token "
                              "(runtime.h minor 2: comm_token, comm_create_from_token); use those.");
  check_device_index(device);
  tv_comm comm = nullptr;
  TV_CALL(comm_create, id.c_str(), nranks, rank, static_cast<int32_t>(device), &comm);
  return reinterpret_cast<uintptr_t>(comm);
}

std::string comm_token(c10::DeviceIndex device) {
  check_collectives();
  TORCH_CHECK_NOT_IMPLEMENTED(has_token_bootstrap(), "the ", backend_name(), " runtime '",
                              runtime_info().name, "' has no comm_token (runtime.h minor 2); "
                              "join communicators by id with comm_create.");
  check_device_index(device);
  std::string token(TV_COMM_TOKEN_MAX, '\0');
  size_t size = 0;
  TV_CALL(comm_token, static_cast<int32_t>(device), token.data(), &size);
  TORCH_CHECK(size > 0 && size <= TV_COMM_TOKEN_MAX, "comm_token: the runtime returned a token of ",
              size, " bytes; it must have 1 to TV_COMM_TOKEN_MAX (", TV_COMM_TOKEN_MAX, ").");
  token.resize(size);
  return token;
}

uintptr_t comm_create_from_token(const std::string& token, int nranks, int rank,
                                 c10::DeviceIndex device) {
  check_collectives();
  TORCH_CHECK_NOT_IMPLEMENTED(has_token_bootstrap(), "the ", backend_name(), " runtime '",
                              runtime_info().name, "' has no comm_create_from_token (runtime.h "
                              "minor 2); join communicators by id with comm_create.");
  TORCH_CHECK_VALUE(!token.empty() && token.size() <= TV_COMM_TOKEN_MAX, "comm_create_from_token: "
                    "a token has 1 to ", TV_COMM_TOKEN_MAX, " bytes, got ", token.size());
  check_device_index(device);
  tv_comm comm = nullptr;
  TV_CALL(comm_create_from_token, token.data(), token.size(), nranks, rank,
          static_cast<int32_t>(device), &comm);
  return reinterpret_cast<uintptr_t>(comm);
}

void comm_destroy(uintptr_t comm) {
  if (comm != 0 && runtime_loaded() && rt().comm_destroy)
    TV_CALL(comm_destroy, reinterpret_cast<tv_comm>(comm));
}

void collective(const std::string& kind, uintptr_t handle, const void* send, void* recv,
                size_t count, c10::ScalarType dtype, int op, int peer, c10::Stream stream) {
  TORCH_CHECK_VALUE(handle != 0, "collective: communicator handle is 0; use comm_create()'s");
  auto comm = reinterpret_cast<tv_comm>(handle);
  const tv_dtype t = to_tv_dtype(dtype);
  const auto r = static_cast<tv_reduce_op>(op);
  tv_stream s = native_stream(stream);
  if (kind == "all_reduce") TV_CALL(all_reduce, send, recv, count, t, r, comm, s);
  else if (kind == "broadcast") TV_CALL(broadcast, send, recv, count, t, peer, comm, s);
  else if (kind == "all_gather") TV_CALL(all_gather, send, recv, count, t, comm, s);
  else if (kind == "reduce_scatter") TV_CALL(reduce_scatter, send, recv, count, t, r, comm, s);
  else if (kind == "send") TV_CALL(send, send, count, t, peer, comm, s);
  else if (kind == "recv") TV_CALL(recv, recv, count, t, peer, comm, s);
  else TORCH_CHECK_VALUE(false, "collective: unknown kind '", kind, "'");
}

}  // namespace torchvendor
