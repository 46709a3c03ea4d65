#include "runtime/engine/EngineCall.h"

#include "runtime/cpu/RuntimeError.h"
#include "runtime/engine/Engine.h"

#include <cstring>

namespace kiln {
namespace {

constexpr uint8_t kLastKind = static_cast<uint8_t>(EngineCall::Kind::DecodeGreedy);

template <typename T> void put(std::string &out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T)); // x86-64 and the GPUs' hosts: little-endian
  out.append(bytes, sizeof(T));
}

class Reader {
public:
  explicit Reader(const std::string &bytes) : bytes_(bytes) {}
  template <typename T> T take() {
    if (bytes_.size() - at_ < sizeof(T))
      throw RuntimeError("an engine call of " + std::to_string(bytes_.size()) +
                         " bytes ends early (at byte " + std::to_string(at_) + ")");
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  // A count of elements of `size` bytes each that the rest can hold.
  uint32_t count(size_t size) {
    const uint32_t n = take<uint32_t>();
    if (n > (bytes_.size() - at_) / size)
      throw RuntimeError("an engine call counts " + std::to_string(n) + " elements past its end");
    return n;
  }
  bool done() const { return at_ == bytes_.size(); }

private:
  const std::string &bytes_;
  size_t at_ = 0;
};

std::vector<std::vector<int32_t>> rowsOf(const EngineCall &call) {
  std::vector<std::vector<int32_t>> rows;
  size_t at = 0;
  for (uint32_t length : call.rowLengths) {
    if (length > call.tokens.size() - at)
      throw RuntimeError("verify_batch call: its rows hold more than its " +
                         std::to_string(call.tokens.size()) + " tokens");
    rows.emplace_back(call.tokens.begin() + static_cast<std::ptrdiff_t>(at),
                      call.tokens.begin() + static_cast<std::ptrdiff_t>(at + length));
    at += length;
  }
  return rows;
}

} // namespace

std::string describe(const EngineCall &call) {
  static const char *const kNames[] = {
      "prefill",      "decode",       "decode_batch", "decode_batch_greedy",
      "verify",       "verify_batch", "rollback",     "forget",
      "reset",        "save",         "restore",      "drop_saved",
      "decode_greedy"};
  std::string text = kNames[static_cast<uint8_t>(call.kind)];
  switch (call.kind) {
  case EngineCall::Kind::Rollback:
    return text + " of conversation " + std::to_string(call.conversation) + " to " +
           std::to_string(call.keep);
  case EngineCall::Kind::Forget:
    return text + " conversation " + std::to_string(call.conversation);
  case EngineCall::Kind::Reset:
    return text;
  case EngineCall::Kind::Save:
    return text + " of conversation " + std::to_string(call.conversation);
  case EngineCall::Kind::Restore:
    return text + " of saved conversation " + std::to_string(call.saved) + " into conversation " +
           std::to_string(call.conversation) + ", keeping " + std::to_string(call.keep);
  case EngineCall::Kind::DropSaved:
    return text + " conversation " + std::to_string(call.saved);
  case EngineCall::Kind::DecodeBatch:
  case EngineCall::Kind::DecodeBatchGreedy:
  case EngineCall::Kind::VerifyBatch:
    return text + " of " +
           std::to_string(call.kind == EngineCall::Kind::VerifyBatch ? call.rowLengths.size()
                                                                     : call.tokens.size()) +
           " conversations";
  default:
    return text + " of " + std::to_string(call.tokens.size()) + " tokens, conversation " +
           std::to_string(call.conversation);
  }
}

std::string encodeCall(const EngineCall &call) {
  std::string out;
  put<uint8_t>(out, static_cast<uint8_t>(call.kind));
  put<int64_t>(out, call.conversation);
  put<int64_t>(out, call.keep);
  put<uint32_t>(out, static_cast<uint32_t>(call.tokens.size()));
  for (int32_t token : call.tokens)
    put<int32_t>(out, token);
  put<uint32_t>(out, static_cast<uint32_t>(call.stepped.size()));
  for (bool flag : call.stepped)
    put<uint8_t>(out, flag ? 1 : 0);
  put<uint32_t>(out, static_cast<uint32_t>(call.rowLengths.size()));
  for (uint32_t length : call.rowLengths)
    put<uint32_t>(out, length);
  put<int64_t>(out, call.saved);
  return out;
}

EngineCall decodeCall(const std::string &bytes) {
  Reader in(bytes);
  EngineCall call;
  const uint8_t kind = in.take<uint8_t>();
  if (kind > kLastKind)
    throw RuntimeError("an engine call of unknown kind " + std::to_string(kind));
  call.kind = static_cast<EngineCall::Kind>(kind);
  call.conversation = in.take<int64_t>();
  call.keep = in.take<int64_t>();
  call.tokens.resize(in.count(sizeof(int32_t)));
  for (int32_t &token : call.tokens)
    token = in.take<int32_t>();
  const uint32_t flags = in.count(1);
  for (uint32_t i = 0; i < flags; ++i)
    call.stepped.push_back(in.take<uint8_t>() != 0);
  call.rowLengths.resize(in.count(sizeof(uint32_t)));
  for (uint32_t &length : call.rowLengths)
    length = in.take<uint32_t>();
  call.saved = in.take<int64_t>();
  if (!in.done())
    throw RuntimeError("an engine call has bytes past its end");
  return call;
}

void replay(Engine &engine, const EngineCall &call) {
  switch (call.kind) {
  case EngineCall::Kind::Prefill:
    engine.prefill(call.conversation, call.tokens);
    return;
  case EngineCall::Kind::Decode:
  case EngineCall::Kind::DecodeGreedy:
    if (call.tokens.size() != 1)
      throw RuntimeError("a decode call takes one token, not " +
                         std::to_string(call.tokens.size()));
    if (call.kind == EngineCall::Kind::Decode)
      engine.decode(call.conversation, call.tokens[0]);
    else
      engine.decodeGreedy(call.conversation, call.tokens[0]);
    return;
  case EngineCall::Kind::DecodeBatch:
    if (call.stepped.empty())
      engine.decodeBatch(call.tokens);
    else
      engine.decodeBatch(call.tokens, call.stepped);
    return;
  case EngineCall::Kind::DecodeBatchGreedy:
    if (call.stepped.empty())
      engine.decodeBatchGreedy(call.tokens);
    else
      engine.decodeBatchGreedy(call.tokens, call.stepped);
    return;
  case EngineCall::Kind::Verify:
    engine.verify(call.conversation, call.tokens);
    return;
  case EngineCall::Kind::VerifyBatch:
    engine.verifyBatch(rowsOf(call));
    return;
  case EngineCall::Kind::Rollback:
    engine.rollback(call.conversation, call.keep);
    return;
  case EngineCall::Kind::Forget:
    engine.forget(call.conversation);
    return;
  case EngineCall::Kind::Reset:
    engine.reset();
    return;
  case EngineCall::Kind::Save: {
    // Numbered as on the rank that made the call, which made the same calls.
    const int64_t number = engine.save(call.conversation);
    if (number == 0)
      throw RuntimeError("save of conversation " + std::to_string(call.conversation) +
                         ": no device memory left for its copy here");
    if (call.saved != 0 && number != call.saved)
      throw RuntimeError("save of conversation " + std::to_string(call.conversation) +
                         " numbered " + std::to_string(number) + " here, " +
                         std::to_string(call.saved) + " where it was made");
    return;
  }
  case EngineCall::Kind::Restore:
    engine.restore(call.conversation, call.saved, call.keep);
    return;
  case EngineCall::Kind::DropSaved:
    engine.dropSaved(call.saved);
    return;
  }
}

} // namespace kiln
