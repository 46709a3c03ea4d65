#include "runtime/serve/Request.h"

namespace kiln::serve {

void TokenChannel::push(TokenEvent event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

void TokenChannel::finish(Finish finish) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!finish_)
      finish_ = std::move(finish);
  }
  ready_.notify_all();
}

std::optional<TokenEvent> TokenChannel::next(std::chrono::milliseconds timeout, bool *timedOut) {
  std::unique_lock<std::mutex> lock(mutex_);
  *timedOut = !ready_.wait_for(lock, timeout, [&] { return !events_.empty() || finish_; });
  if (events_.empty())
    return std::nullopt;
  TokenEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

Finish TokenChannel::finishState() {
  std::lock_guard<std::mutex> lock(mutex_);
  return finish_ ? *finish_ : Finish{};
}

void TokenChannel::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
}

bool TokenChannel::cancelled() {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

} // namespace kiln::serve
