#include "server/kserve/http_front_end.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "httplib.h"

#include "proto/kserve_wire.h"
#include "server/kserve/codec.h"
#include "server/kserve/json.h"

namespace tensorcompute::server::kserve {
namespace {

constexpr char kJson[] = "application/json";
constexpr char kHeaderLength[] = "Inference-Header-Content-Length";

void Reply(httplib::Response& res, const absl::Status& status) {
  res.status = proto::HttpStatusOf(status.code());
  res.set_content(ErrorJson(status.message()), kJson);
}

std::optional<absl::string_view> AuthorizationOf(const httplib::Request& req) {
  const auto it = req.headers.find("Authorization");  // httplib compares names case-blind
  if (it == req.headers.end()) return std::nullopt;
  return absl::string_view(it->second);
}

// "/v2/models/{name}[/versions/{v}]" followed by `suffix`: name in match 1, version in 2.
std::string ModelPattern(absl::string_view suffix) {
  return absl::StrCat(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)", suffix);
}

// One HTTP thread's buffers for /infer: the body, the decoded request and the response, kept
// from call to call so that a steady stream of large requests reuses pages already faulted in
// (a fresh 1 MiB buffer costs several times its copy to fault in; 55% of a 1 MiB call's server
// time went to growing and faulting fresh body strings). A call that moved more than
// kKeepBytes releases them afterwards: at most about 3 x 4 MiB stay with each HTTP thread.
// httplib runs a connection's request and its response on one thread, so a response that
// refers to these is written before the thread reads its next request.
struct InferScratch {
  static constexpr size_t kKeepBytes = size_t{4} << 20;
  std::string body;
  inference::ModelInferRequest request;
  inference::ModelInferResponse response;

  void TrimAfter(size_t call_bytes) {
    if (call_bytes <= kKeepBytes) return;
    std::string().swap(body);
    request = inference::ModelInferRequest();
    response = inference::ModelInferResponse();
  }
};

InferScratch& ThreadScratch() {
  thread_local InferScratch scratch;
  return scratch;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpFrontEnd>> HttpFrontEnd::Start(const Options& options,
                                                                  CallGate* gate,
                                                                  ComputeService* compute,
                                                                  std::function<bool()> ready) {
  const size_t colon = options.listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(options.listen).substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("http_listen '", options.listen, "' is not host:port"));
  }
  std::string host = options.listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::unique_ptr<HttpFrontEnd> http(new HttpFrontEnd());
  http->gate_ = gate;
  http->compute_ = compute;
  http->ready_ = std::move(ready);
  http->http_ = std::make_unique<httplib::Server>();
  const int threads = std::max(1, options.threads);
  http->http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // cpp-httplib writes a response's headers and body separately: with Nagle's algorithm the
  // body of a small answer waits for the client's delayed ACK (~40 ms on Linux).
  http->http_->set_tcp_nodelay(true);
  http->payload_max_ = static_cast<size_t>(std::max<int64_t>(0, options.max_body_bytes));
  http->http_->set_payload_max_length(http->payload_max_);
  http->Route();
  const int max_body = static_cast<int>(std::min<int64_t>(options.max_body_bytes, INT32_MAX));
  http->http_->set_error_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // one of ours, already {"error": ...}
    std::string message;
    if (res.status == 413) {
      message =
          absl::StrCat("the request body is larger than max_message_bytes (", max_body, " bytes)");
    } else if (res.status == 404) {
      message = absl::StrCat("no such endpoint: ", req.method, " ", req.path,
                             " (KServe v2 REST: /v2, /v2/health/{live,ready}, "
                             "/v2/models/{name}[/versions/{v}][/ready|/infer])");
    } else {
      message = absl::StrCat("HTTP status ", res.status);
    }
    res.set_content(ErrorJson(message), kJson);
  });
  http->http_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        Reply(res, absl::InternalError("internal error while serving the HTTP request"));
      });
  const bool bound = port == 0 ? (port = http->http_->bind_to_any_port(host)) > 0
                               : http->http_->bind_to_port(host, port);
  if (!bound) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (http_listen)"));
  }
  http->port_ = port;
  HttpFrontEnd* raw = http.get();
  http->thread_ = std::thread([raw] {
    raw->http_->listen_after_bind();
    raw->listen_returned_.store(true);
  });
  return http;
}

HttpFrontEnd::~HttpFrontEnd() { Stop(); }

void HttpFrontEnd::Stop() {
  if (!thread_.joinable()) return;
  // httplib's stop() does nothing before its accept loop runs: wait for it to start (or fail).
  while (!http_->is_running() && !listen_returned_.load()) absl::SleepFor(absl::Milliseconds(1));
  http_->stop();
  thread_.join();
}

void HttpFrontEnd::Route() {
  httplib::Server& http = *http_;
  // Every endpoint but the health ones: the token, then draining. Answers refusals itself.
  auto admit = [this](const httplib::Request& req, httplib::Response& res, Rpc rpc,
                      absl::Time start) {
    absl::Status admitted = gate_->Admit(AuthorizationOf(req), /*needs_admin=*/false);
    if (!admitted.ok()) Answer(res, rpc, start, admitted);
    return admitted.ok();
  };
  auto ready_reply = [](httplib::Response& res, bool ready) {
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "{\"ready\":true}" : "{\"ready\":false}", kJson);
  };

  http.Get("/v2/health/live", [this](const httplib::Request&, httplib::Response& res) {
    const absl::Time start = gate_->Arrive();
    res.set_content("{\"live\":true}", kJson);
    gate_->Answer(Rpc::kServerLive, start, absl::OkStatus());
  });
  http.Get("/v2/health/ready",
           [this, ready_reply](const httplib::Request&, httplib::Response& res) {
             const absl::Time start = gate_->Arrive();
             ready_reply(res, ready_() && !gate_->draining());
             gate_->Answer(Rpc::kServerReady, start, absl::OkStatus());
           });
  http.Get("/v2", [this, admit](const httplib::Request& req, httplib::Response& res) {
    const absl::Time start = gate_->Arrive();
    if (!admit(req, res, Rpc::kServerMetadata, start)) return;
    res.set_content(ServerMetadataJson(ServerMetadata()), kJson);
    gate_->Answer(Rpc::kServerMetadata, start, absl::OkStatus());
  });
  http.Get(ModelPattern(""), [this, admit](const httplib::Request& req, httplib::Response& res) {
    const absl::Time start = gate_->Arrive();
    if (!admit(req, res, Rpc::kModelMetadata, start)) return;
    absl::StatusOr<inference::ModelMetadataResponse> metadata =
        ModelMetadata(req.matches[1].str(), req.matches[2].str(), compute_->registry());
    if (!metadata.ok()) return Answer(res, Rpc::kModelMetadata, start, metadata.status());
    res.set_content(ModelMetadataJson(*metadata), kJson);
    gate_->Answer(Rpc::kModelMetadata, start, absl::OkStatus());
  });
  http.Get(ModelPattern("/ready"),
           [this, admit, ready_reply](const httplib::Request& req, httplib::Response& res) {
             const absl::Time start = gate_->Arrive();
             if (!admit(req, res, Rpc::kModelReady, start)) return;
             absl::StatusOr<bool> ready =
                 ModelReady(req.matches[1].str(), req.matches[2].str(), compute_->registry());
             if (!ready.ok()) return Answer(res, Rpc::kModelReady, start, ready.status());
             ready_reply(res, *ready && ready_());
             gate_->Answer(Rpc::kModelReady, start, absl::OkStatus());
           });
  http.Post(ModelPattern("/infer"), [this, admit](const httplib::Request& req,
                                                  httplib::Response& res,
                                                  const httplib::ContentReader& read) {
    InferScratch& scratch = ThreadScratch();
    scratch.body.clear();
    // Read the body ourselves (httplib would grow a fresh string 4 KiB at a time): into this
    // thread's buffer, sized once from Content-Length (httplib has already refused one over
    // max_message_bytes with 413 before any byte is read).
    size_t expected = 0;
    if (absl::SimpleAtoi(req.get_header_value("Content-Length"), &expected) &&
        expected <= payload_max_) {
      scratch.body.reserve(expected);
    }
    const bool read_all = read([&scratch](const char* data, size_t n) {
      scratch.body.append(data, n);
      return true;
    });
    if (!read_all) {  // too large (httplib set 413; the error handler words it) or cut short
      if (res.status < 400) res.status = 400;
      scratch.TrimAfter(scratch.body.capacity());
      return;
    }
    const absl::Time start = gate_->Arrive();
    const size_t body_bytes = scratch.body.size();
    auto fail = [&](const absl::Status& status) {
      Answer(res, Rpc::kModelInfer, start, status);
      scratch.TrimAfter(body_bytes);
    };
    if (!admit(req, res, Rpc::kModelInfer, start)) return scratch.TrimAfter(body_bytes);
    std::optional<int64_t> header_length;
    if (req.has_header(kHeaderLength)) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(req.get_header_value(kHeaderLength), &n)) {
        return fail(
            absl::InvalidArgumentError(absl::StrCat(kHeaderLength, " is not a number of bytes")));
      }
      header_length = n;
    }
    inference::ModelInferRequest& request = scratch.request;
    request.Clear();  // keeps its raw_input_contents' buffers for reuse
    HttpInferOptions options;
    if (absl::Status parsed =
            ParseHttpInferRequest(scratch.body, header_length, &request, &options);
        !parsed.ok()) {
      return fail(parsed);
    }
    request.set_model_name(req.matches[1].str());
    request.set_model_version(req.matches[2].str());
    const absl::Time deadline = options.timeout_us.has_value()
                                    ? absl::Now() + absl::Microseconds(*options.timeout_us)
                                    : absl::InfiniteFuture();
    inference::ModelInferResponse& response = scratch.response;
    response.Clear();  // keeps its buffers' pages
    if (absl::Status status = Infer(request, static_cast<int64_t>(body_bytes), deadline, &response);
        !status.ok()) {
      return fail(status);
    }
    gate_->Answer(Rpc::kModelInfer, start, absl::OkStatus());
    size_t output_bytes = 0;
    for (const std::string& raw : response.raw_output_contents()) output_bytes += raw.size();
    const size_t call_bytes = std::max(body_bytes, output_bytes);
    if (!options.binary_output) {
      res.set_content(WriteHttpInferResponse(response, false).body, kJson);
      return scratch.TrimAfter(call_bytes);
    }
    // Binary output: the JSON, then the outputs' bytes sent from the response itself, which
    // this thread keeps until httplib has written it (it writes before its next request).
    auto body =
        std::make_shared<HttpBody>(WriteHttpInferResponse(response, true, /*append_binary=*/false));
    size_t total = body->body.size();
    for (absl::string_view part : body->binary) total += part.size();
    res.set_header(kHeaderLength, absl::StrCat(*body->header_length));
    res.set_content_provider(
        total, "application/octet-stream",
        [body](size_t offset, size_t, httplib::DataSink& sink) {
          // Everything from `offset` on, part by part (httplib calls again if a write stops short).
          std::vector<absl::string_view> parts = {body->body};
          parts.insert(parts.end(), body->binary.begin(), body->binary.end());
          for (absl::string_view part : parts) {
            if (offset >= part.size()) {
              offset -= part.size();
              continue;
            }
            if (!sink.write(part.data() + offset, part.size() - offset)) return false;
            offset = 0;
          }
          return true;
        },
        [&scratch, call_bytes](bool) { scratch.TrimAfter(call_bytes); });
  });
}

void HttpFrontEnd::Answer(httplib::Response& res, Rpc rpc, absl::Time start,
                          const absl::Status& status) {
  gate_->Answer(rpc, start, status);
  Reply(res, status);
}

absl::Status HttpFrontEnd::Infer(const inference::ModelInferRequest& request, int64_t message_bytes,
                                 absl::Time deadline, inference::ModelInferResponse* response) {
  ByteBudget& budget = compute_->budget();
  std::optional<ByteBudget::Reservation> reservation = budget.TryReserve(message_bytes);
  if (!reservation.has_value()) return budget.NeedsError(message_bytes);
  InferJob job;
  if (absl::Status prepared =
          PrepareInfer(request, compute_->registry(), compute_->plan_options(), &job);
      !prepared.ok()) {
    return prepared;
  }
  ComputeRequest compute_request;
  compute_request.plan = job.plan;
  compute_request.params = job.params;
  compute_request.indices = job.indices;
  compute_request.table = job.table;
  compute_request.deadline = deadline;
  compute_request.make_output = [&job, response] { return PrepareInferOutput(&job, response); };
  // No cancel flag: a client that disconnects (httplib gives no notice while the handler
  // waits) still has its request computed, and the answer dropped.
  absl::Notification done;
  absl::Status result;
  compute_->Submit(std::move(compute_request), &*reservation,
                   [&done, &result](absl::Status status) {
                     result = std::move(status);
                     done.Notify();
                   });
  done.WaitForNotification();
  if (result.ok()) CompleteInferResponse(request, &job, response);
  return result;
}

}  // namespace tensorcompute::server::kserve
