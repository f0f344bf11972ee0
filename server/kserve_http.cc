#include "server/kserve_http.h"

#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "httplib.h"

#include "server/kserve_codec.h"
#include "server/kserve_json.h"

namespace tensorcompute::server {
namespace {

constexpr char kJson[] = "application/json";
constexpr char kHeaderLength[] = "Inference-Header-Content-Length";

void Reply(httplib::Response& res, const absl::Status& status) {
  res.status = kserve::HttpStatusOf(status.code());
  res.set_content(kserve::ErrorJson(status.message()), kJson);
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

}  // namespace

absl::StatusOr<std::unique_ptr<KserveHttp>> KserveHttp::Start(const Options& options,
                                                              ComputeService* service,
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
  std::unique_ptr<KserveHttp> http(new KserveHttp());
  http->service_ = service;
  http->ready_ = std::move(ready);
  http->http_ = std::make_unique<httplib::Server>();
  const int threads = std::max(1, options.threads);
  http->http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // cpp-httplib writes a response's headers and body separately: with Nagle's algorithm the
  // body of a small answer waits for the client's delayed ACK (~40 ms on Linux).
  http->http_->set_tcp_nodelay(true);
  http->http_->set_payload_max_length(
      static_cast<size_t>(std::max<int64_t>(0, options.max_body_bytes)));
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
    res.set_content(kserve::ErrorJson(message), kJson);
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
  KserveHttp* raw = http.get();
  http->thread_ = std::thread([raw] {
    raw->http_->listen_after_bind();
    raw->listen_returned_.store(true);
  });
  return http;
}

KserveHttp::~KserveHttp() { Stop(); }

void KserveHttp::Stop() {
  if (!thread_.joinable()) return;
  // httplib's stop() does nothing before its accept loop runs: wait for it to start (or fail).
  while (!http_->is_running() && !listen_returned_.load()) absl::SleepFor(absl::Milliseconds(1));
  http_->stop();
  thread_.join();
}

void KserveHttp::Route() {
  httplib::Server& http = *http_;
  // Everything but the health endpoints: the token, then draining.
  auto admit = [this](const httplib::Request& req, httplib::Response& res) {
    if (absl::Status auth = service_->Authorize(AuthorizationOf(req), /*admin=*/false);
        !auth.ok()) {
      Reply(res, auth);
      return false;
    }
    if (service_->draining()) {
      Reply(res, absl::UnavailableError("server is draining; retry on another replica"));
      return false;
    }
    return true;
  };
  auto ready_reply = [](httplib::Response& res, bool ready) {
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "{\"ready\":true}" : "{\"ready\":false}", kJson);
  };

  http.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"live\":true}", kJson);
  });
  http.Get("/v2/health/ready",
           [this, ready_reply](const httplib::Request&, httplib::Response& res) {
             ready_reply(res, ready_() && !service_->draining());
           });
  http.Get("/v2", [admit](const httplib::Request& req, httplib::Response& res) {
    if (!admit(req, res)) return;
    res.set_content(kserve::ServerMetadataJson(kserve::ServerMetadata()), kJson);
  });
  http.Get(ModelPattern(""), [this, admit](const httplib::Request& req, httplib::Response& res) {
    if (!admit(req, res)) return;
    absl::StatusOr<inference::ModelMetadataResponse> metadata =
        kserve::ModelMetadata(req.matches[1].str(), req.matches[2].str(), service_->registry());
    if (!metadata.ok()) return Reply(res, metadata.status());
    res.set_content(kserve::ModelMetadataJson(*metadata), kJson);
  });
  http.Get(ModelPattern("/ready"),
           [this, admit, ready_reply](const httplib::Request& req, httplib::Response& res) {
             if (!admit(req, res)) return;
             absl::StatusOr<bool> ready = kserve::ModelReady(
                 req.matches[1].str(), req.matches[2].str(), service_->registry());
             if (!ready.ok()) return Reply(res, ready.status());
             ready_reply(res, *ready && ready_());
           });
  http.Post(
      ModelPattern("/infer"), [this, admit](const httplib::Request& req, httplib::Response& res) {
        if (!admit(req, res)) return;
        std::optional<int64_t> header_length;
        if (req.has_header(kHeaderLength)) {
          int64_t n = 0;
          if (!absl::SimpleAtoi(req.get_header_value(kHeaderLength), &n)) {
            return Reply(res, absl::InvalidArgumentError(
                                  absl::StrCat(kHeaderLength, " is not a number of bytes")));
          }
          header_length = n;
        }
        inference::ModelInferRequest request;
        kserve::HttpInferOptions options;
        if (absl::Status parsed =
                kserve::ParseHttpInferRequest(req.body, header_length, &request, &options);
            !parsed.ok()) {
          return Reply(res, parsed);
        }
        request.set_model_name(req.matches[1].str());
        request.set_model_version(req.matches[2].str());
        const absl::Time deadline = options.timeout_us.has_value()
                                        ? absl::Now() + absl::Microseconds(*options.timeout_us)
                                        : absl::InfiniteFuture();
        absl::StatusOr<inference::ModelInferResponse> response =
            service_->InferBlocking(request, static_cast<int64_t>(req.body.size()), deadline);
        if (!response.ok()) return Reply(res, response.status());
        kserve::HttpBody body = kserve::WriteHttpInferResponse(*response, options.binary_output);
        *response = inference::ModelInferResponse();  // hold the output once, in the body
        if (body.header_length.has_value()) {
          res.set_header(kHeaderLength, absl::StrCat(*body.header_length));
          res.set_header("Content-Type", "application/octet-stream");
        } else {
          res.set_header("Content-Type", kJson);
        }
        res.body = std::move(body.body);  // set_content would copy it
      });
}

}  // namespace tensorcompute::server
