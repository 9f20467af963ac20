#include "server/coordinator/dashboard.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/fake_clock.h"
#include "nlohmann/json.hpp"
#include "server/coordinator/dashboard_server.h"
#include "server/coordinator/test_fakes.h"

namespace ps::coordinator {
namespace {

constexpr char kToken[] = "s3cret-token";
constexpr char kChartJs[] = "/* chart.js stand-in */ var Chart = {};";

JobSpec Spec() {
  JobSpec spec;
  spec.set_name("dash \"job\" <b>");
  spec.mutable_model()->mutable_mlp()->set_input_dim(784);
  spec.mutable_model()->mutable_mlp()->add_hidden(16);
  spec.mutable_model()->mutable_mlp()->set_num_classes(10);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.set_num_workers(1);
  return spec;
}

HttpRequest Get(const std::string& path,
                std::multimap<std::string, std::string> query = {},
                const std::string& token = kToken) {
  HttpRequest r;
  r.path = path;
  r.query = std::move(query);
  r.token = token;
  return r;
}

// The message an API body holds.
template <typename Message>
Message Parse(const HttpResponse& r) {
  Message m;
  auto s = google::protobuf::util::JsonStringToMessage(r.body, &m);
  EXPECT_TRUE(s.ok()) << s.ToString() << "\n" << r.body;
  return m;
}

bool Equal(const google::protobuf::Message& a,
           const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp ? tmp : "/tmp") + "/dash_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    chart_js_path_ = dir_ + "/chart.min.js";
    std::ofstream(chart_js_path_) << kChartJs;
    auto store = JobStore::Open(dir_ + "/store");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    CoordinatorOptions options;
    options.check_dataset_files = false;
    shards_.default_checkpoints = {40};
    auto core = Coordinator::Create(options, &clock_, store_.get(), &shards_);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);

    // A server, a worker with its BLAS probe, and one running job with a
    // few metric points and events.
    RegisterRequest server;
    server.set_role(SERVER);
    server.set_address("127.0.0.1:7001");
    ASSERT_TRUE(core_->Register(server).ok());
    RegisterRequest worker;
    worker.set_role(WORKER);
    worker.set_device("cpu");
    worker.set_blas_core("Haswell");
    worker.set_gemm_gflops(95.5);
    auto w = core_->Register(worker);
    ASSERT_TRUE(w.ok());
    worker_ = w->member_id();
    SubmitJobRequest submit;
    *submit.mutable_spec() = Spec();
    auto job = core_->SubmitJob(submit);
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = job->job_id();
    core_->Tick();
    HeartbeatRequest beat;
    beat.set_member_id(worker_);
    ASSERT_TRUE(core_->Heartbeat(beat).ok());
    ReportMetricsRequest report;
    report.set_member_id(worker_);
    report.set_job_id(job_);
    for (int step = 1; step <= 3; ++step) {
      for (const char* name : {"train_loss", "test_accuracy", "compute_ms"}) {
        MetricPoint* p = report.add_points();
        p->set_name(name);
        p->set_value(1.0 / step);
        p->set_step(step * 10);
        p->set_epoch(step * 0.5);
        p->set_time_ms(step * 1000);
      }
    }
    absl::Status reported = core_->ReportMetrics(report);
    ASSERT_TRUE(reported.ok()) << reported;

    DashboardOptions dash;
    dash.token = kToken;
    dash.chart_js_path = chart_js_path_;
    auto d = Dashboard::Create(core_.get(), dash);
    ASSERT_TRUE(d.ok()) << d.status();
    dashboard_ = std::move(*d);
  }

  std::string dir_, chart_js_path_, job_;
  int64_t worker_ = 0;
  FakeClock clock_;
  FakeShardClient shards_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<Coordinator> core_;
  std::unique_ptr<Dashboard> dashboard_;
};

TEST_F(DashboardTest, ApiAnswersWhatTheCoreAnswers) {
  struct Case {
    std::string path;
    std::function<bool(const HttpResponse&)> same;
  };
  GetMetricsRequest all;
  all.set_job_id(job_);
  const std::vector<Case> cases = {
      {"/api/members",
       [&](const HttpResponse& r) {
         return Equal(Parse<ListMembersResponse>(r), core_->ListMembers());
       }},
      {"/api/jobs",
       [&](const HttpResponse& r) {
         return Equal(Parse<ListJobsResponse>(r), core_->ListJobs());
       }},
      {"/api/jobs/" + job_,
       [&](const HttpResponse& r) {
         return Equal(Parse<JobRecord>(r), *core_->GetJob(job_));
       }},
      {"/api/jobs/" + job_ + "/metrics",
       [&](const HttpResponse& r) {
         return Equal(Parse<GetMetricsResponse>(r), *core_->GetMetrics(all));
       }},
      {"/api/jobs/" + job_ + "/events",
       [&](const HttpResponse& r) {
         return Equal(Parse<GetEventsResponse>(r), *core_->GetEvents(job_));
       }},
      {"/api/jobs/" + job_ + "/explain",
       [&](const HttpResponse& r) {
         ExplainJobResponse got = Parse<ExplainJobResponse>(r);
         // The text quotes heartbeat ages; the shards' part must agree.
         ExplainJobResponse want = *core_->ExplainJob(job_);
         return got.shards_size() == want.shards_size() &&
                got.text().find("diagnosis:") != std::string::npos;
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    HttpResponse r = dashboard_->Handle(Get(c.path));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.content_type, "application/json");
    EXPECT_TRUE(c.same(r)) << r.body;
  }
  // What the page relies on: the job's name escaped, the probe, metrics.
  auto jobs = nlohmann::json::parse(dashboard_->Handle(Get("/api/jobs")).body);
  EXPECT_EQ(jobs["jobs"][0]["spec"]["name"], "dash \"job\" <b>");
  EXPECT_EQ(jobs["jobs"][0]["state"], "RUNNING");
  auto members =
      nlohmann::json::parse(dashboard_->Handle(Get("/api/members")).body);
  bool probe = false;
  for (const auto& m : members["members"]) {
    probe |= m["blas_core"] == "Haswell" && m["gemm_gflops"] == 95.5;
  }
  EXPECT_TRUE(probe) << members.dump();
}

TEST_F(DashboardTest, MetricsQuery) {
  HttpResponse r = dashboard_->Handle(Get(
      "/api/jobs/" + job_ + "/metrics", {{"names", "train_loss,compute_ms"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  GetMetricsResponse m = Parse<GetMetricsResponse>(r);
  EXPECT_EQ(m.points_size(), 6);
  for (const MetricPoint& p : m.points()) EXPECT_NE(p.name(), "test_accuracy");

  // Repeated names add up; include_superseded parses.
  r = dashboard_->Handle(
      Get("/api/jobs/" + job_ + "/metrics", {{"names", "train_loss"},
                                             {"names", "test_accuracy"},
                                             {"include_superseded", "true"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Parse<GetMetricsResponse>(r).points_size(), 6);

  // max_points thins each series evenly, keeping its first and last.
  r = dashboard_->Handle(Get("/api/jobs/" + job_ + "/metrics",
                             {{"names", "train_loss"}, {"max_points", "2"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  m = Parse<GetMetricsResponse>(r);
  ASSERT_EQ(m.points_size(), 2);
  EXPECT_EQ(m.points(0).step(), 10);
  EXPECT_EQ(m.points(1).step(), 30);
  r = dashboard_->Handle(Get("/api/jobs/" + job_ + "/metrics",
                             {{"names", "train_loss"}, {"max_points", "3"}}));
  EXPECT_EQ(Parse<GetMetricsResponse>(r).points_size(), 3);

  // format=csv / json: psctl metrics' text.
  GetMetricsRequest csv;
  csv.set_job_id(job_);
  csv.set_format("csv");
  r = dashboard_->Handle(
      Get("/api/jobs/" + job_ + "/metrics", {{"format", "csv"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/csv; charset=utf-8");
  EXPECT_EQ(r.body, core_->GetMetrics(csv)->text());
  r = dashboard_->Handle(
      Get("/api/jobs/" + job_ + "/metrics", {{"format", "json"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  auto json = nlohmann::json::parse(r.body);
  EXPECT_EQ(json["job_id"], job_);
  EXPECT_EQ(json["series"]["train_loss"].size(), 3u);
}

TEST_F(DashboardTest, BadInputGetsAStatusAndChangesNothing) {
  const ListJobsResponse jobs_before = core_->ListJobs();
  const ListMembersResponse members_before = core_->ListMembers();
  const std::string job = "/api/jobs/" + job_;
  struct Case {
    HttpRequest request;
    int status;
    std::string message;  // a part of the error message
  };
  HttpRequest post = Get(job);
  post.method = "POST";
  HttpRequest del = Get(job);
  del.method = "DELETE";
  const std::vector<Case> cases = {
      {Get("/api/jobs/no-such-job"), 404, "no-such-job"},
      {Get("/api/jobs/no-such-job/metrics"), 404, "no-such-job"},
      {Get("/api/jobs/no-such-job/events"), 404, "no-such-job"},
      {Get("/api/jobs/no-such-job/explain"), 404, "no-such-job"},
      {Get(job + "/cancel"), 404, "no such page"},
      {Get(job + "/metrics/x"), 404, "no such page"},
      {Get("/api/nothing"), 404, "no such page"},
      {Get("/etc/passwd"), 404, "no such page"},
      {Get("/api/jobs", {{"limit", "3"}}), 400, "unknown query parameter"},
      {Get(job + "/metrics", {{"nmaes", "x"}}), 400, "allowed: format"},
      {Get(job + "/metrics", {{"include_superseded", "maybe"}}), 400,
       "must be true or false"},
      {Get(job + "/metrics", {{"format", "xml"}}), 400, "format"},
      {Get(job + "/metrics", {{"max_points", "1"}}), 400, "max_points"},
      {Get(job + "/metrics", {{"max_points", "ten"}}), 400, "max_points"},
      {Get(job + "/metrics", {{"max_points", "99999999999"}}), 400,
       "max_points"},
      {Get(job + "/metrics", {{"max_points", "10"}, {"format", "csv"}}), 400,
       "max_points"},
      {Get(job + "/metrics", {{"format", "csv"}, {"format", "json"}}), 400,
       "more than once"},
      {Get(job, {}, ""), 401, "missing cluster token"},
      {Get("/", {}, ""), 401, "missing cluster token"},
      {Get("/static/chart.js", {}, ""), 401, "missing cluster token"},
      {Get(job, {}, "wrong"), 401, "wrong cluster token"},
      {Get(job, {}, std::string(kToken) + "x"), 401, "wrong cluster token"},
      {post, 405, "read-only"},
      {del, 405, "read-only"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.request.method, " ", c.request.path));
    HttpResponse r = dashboard_->Handle(c.request);
    EXPECT_EQ(r.status, c.status) << r.body;
    EXPECT_EQ(r.content_type, "application/json");
    auto body = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/
                                      false);
    ASSERT_FALSE(body.is_discarded()) << r.body;
    EXPECT_NE(body["error"]["message"].get<std::string>().find(c.message),
              std::string::npos)
        << r.body;
    EXPECT_TRUE(body["error"]["code"].is_string());
    for (const auto& [name, value] : r.headers) EXPECT_NE(name, "Set-Cookie");
  }
  EXPECT_TRUE(Equal(core_->ListJobs(), jobs_before));
  EXPECT_TRUE(Equal(core_->ListMembers(), members_before));
}

TEST_F(DashboardTest, ErrorsEscapeWhatTheyQuote) {
  // A path with quotes, a newline and bytes that are not UTF-8.
  HttpResponse r =
      dashboard_->Handle(Get("/api/jobs/a\"b\n\xff\xfe<script>/events"));
  EXPECT_EQ(r.status, 404);
  auto body = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_FALSE(body.is_discarded()) << r.body;
  EXPECT_EQ(r.body.find('\n'), r.body.size() - 1) << r.body;
}

TEST_F(DashboardTest, PageAndAssets) {
  HttpResponse page = dashboard_->Handle(Get("/"));
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  for (const char* part : {"static/chart.js", "static/dashboard.js",
                           "id=\"members\"", "id=\"jobs\""}) {
    EXPECT_NE(page.body.find(part), std::string::npos) << part;
  }
  HttpResponse js = dashboard_->Handle(Get("/static/dashboard.js"));
  EXPECT_EQ(js.status, 200);
  EXPECT_NE(js.body.find("api/jobs"), std::string::npos);
  HttpResponse chart = dashboard_->Handle(Get("/static/chart.js"));
  EXPECT_EQ(chart.status, 200);
  EXPECT_EQ(chart.body, kChartJs);
}

TEST_F(DashboardTest, TokenFromTheQueryBecomesACookie) {
  HttpRequest r = Get("/", {{"token", kToken}});
  r.token_from_query = true;
  HttpResponse page = dashboard_->Handle(r);
  ASSERT_EQ(page.status, 200) << page.body;
  std::string cookie;
  for (const auto& [name, value] : page.headers) {
    if (name == "Set-Cookie") cookie = value;
  }
  EXPECT_EQ(cookie, absl::StrCat("ps_token=", kToken,
                                 "; Path=/; HttpOnly; SameSite=Strict"));
  // A header token sets none.
  for (const auto& [name, value] : dashboard_->Handle(Get("/")).headers) {
    EXPECT_NE(name, "Set-Cookie");
  }
}

TEST_F(DashboardTest, NoTokenConfiguredLetsEveryoneRead) {
  DashboardOptions open;
  open.chart_js_path = chart_js_path_;
  auto d = Dashboard::Create(core_.get(), open);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->Handle(Get("/api/jobs", {}, "")).status, 200);
}

TEST_F(DashboardTest, MissingChartJsIsAClearError) {
  DashboardOptions bad;
  bad.chart_js_path = dir_ + "/nope/chart.min.js";
  auto d = Dashboard::Create(core_.get(), bad);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("libjs-chart.js"), std::string::npos);
}

TEST(HttpStatus, OfEachCode) {
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kFailedPrecondition), 409);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInternal), 500);
}

// The same handler behind a real HTTP port on 127.0.0.1.
TEST_F(DashboardTest, OverHttp) {
  DashboardServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  auto server = DashboardServer::Start(dashboard_.get(), options);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->url(),
            absl::StrCat("http://127.0.0.1:", (*server)->port(), "/"));
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);

  auto no_token = client.Get("/api/jobs");
  ASSERT_TRUE(no_token) << httplib::to_string(no_token.error());
  EXPECT_EQ(no_token->status, 401);
  EXPECT_NE(no_token->body.find("missing cluster token"), std::string::npos);

  auto jobs = client.Get("/api/jobs", {{"X-PS-Token", kToken}});
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 200);
  EXPECT_EQ(jobs->get_header_value("Content-Type"), "application/json");
  HttpResponse got;
  got.body = jobs->body;
  EXPECT_TRUE(Equal(Parse<ListJobsResponse>(got), core_->ListJobs()));

  auto bearer =
      client.Get("/api/jobs/" + job_,
                 {{"Authorization", absl::StrCat("Bearer ", kToken)}});
  ASSERT_TRUE(bearer);
  EXPECT_EQ(bearer->status, 200);

  // The page opened with ?token= sets the cookie its requests then carry.
  auto page = client.Get(absl::StrCat("/?token=", kToken));
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Set-Cookie").find("HttpOnly"),
            std::string::npos);
  auto by_cookie = client.Get(
      "/api/members", {{"Cookie", absl::StrCat("a=1; ps_token=", kToken)}});
  ASSERT_TRUE(by_cookie);
  EXPECT_EQ(by_cookie->status, 200);

  // A stale cookie (an earlier cluster's) loses to the token in the query.
  auto fresh = client.Get(absl::StrCat("/api/jobs?token=", kToken),
                          {{"Cookie", "ps_token=old"}});
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->status, 200);
  auto stale = client.Get("/api/jobs", {{"Cookie", "ps_token=old"}});
  ASSERT_TRUE(stale);
  EXPECT_EQ(stale->status, 401);

  auto unknown = client.Get("/api/jobs/nope", {{"X-PS-Token", kToken}});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);

  auto post = client.Post("/api/jobs", {{"X-PS-Token", kToken}}, "{}",
                          "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET");
}

// HTTPS with the cluster's certificates, and mutual TLS with --tls_ca:
// throwaway certificates made with openssl (skipped without it).
TEST_F(DashboardTest, OverHttpsWithClientCertificates) {
  const std::string c = dir_ + "/certs";
  std::filesystem::create_directories(c);
  const std::string make = absl::StrCat(
      "cd '", c, "' && command -v openssl >/dev/null && ",
      "printf 'subjectAltName = DNS:localhost, IP:127.0.0.1\\n",
      "extendedKeyUsage = serverAuth, clientAuth\\n' > node.ext && ",
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj '/CN=ps ca' ",
      "-keyout ca.key -out ca.pem 2>/dev/null && ",
      "openssl req -newkey rsa:2048 -nodes -keyout node.key -subj ",
      "'/CN=localhost' -out node.csr 2>/dev/null && ",
      "openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key ",
      "-CAcreateserial -days 1 -out node.pem -extfile node.ext 2>/dev/null");
  if (std::system(make.c_str()) != 0) {
    GTEST_SKIP() << "openssl cannot make test certificates here";
  }
  DashboardServerOptions options;
  options.tls.cert_file = c + "/node.pem";
  options.tls.key_file = c + "/node.key";
  options.tls.ca_file = c + "/ca.pem";
  auto server = DashboardServer::Start(dashboard_.get(), options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_EQ((*server)->url(), absl::StrCat("https://127.0.0.1:", port, "/"));

  httplib::SSLClient with_cert("127.0.0.1", port, c + "/node.pem",
                               c + "/node.key");
  with_cert.set_ca_cert_path((c + "/ca.pem").c_str());
  with_cert.enable_server_certificate_verification(true);
  with_cert.set_connection_timeout(5, 0);
  with_cert.set_read_timeout(5, 0);
  auto ok = with_cert.Get("/api/jobs", {{"X-PS-Token", kToken}});
  ASSERT_TRUE(ok) << httplib::to_string(ok.error());
  EXPECT_EQ(ok->status, 200);
  auto no_token = with_cert.Get("/api/jobs");
  ASSERT_TRUE(no_token);
  EXPECT_EQ(no_token->status, 401);

  httplib::SSLClient without_cert("127.0.0.1", port);
  without_cert.set_ca_cert_path((c + "/ca.pem").c_str());
  without_cert.enable_server_certificate_verification(true);
  without_cert.set_connection_timeout(5, 0);
  without_cert.set_read_timeout(5, 0);
  auto refused = without_cert.Get("/api/jobs", {{"X-PS-Token", kToken}});
  EXPECT_FALSE(refused && refused->status == 200);

  httplib::Client plain("127.0.0.1", port);
  plain.set_connection_timeout(5, 0);
  plain.set_read_timeout(5, 0);
  auto plaintext = plain.Get("/api/jobs", {{"X-PS-Token", kToken}});
  EXPECT_FALSE(plaintext && plaintext->status == 200);
}

TEST_F(DashboardTest, PortInUseIsUnavailable) {
  auto first = DashboardServer::Start(dashboard_.get(), {});
  ASSERT_TRUE(first.ok());
  DashboardServerOptions same;
  same.port = (*first)->port();
  auto second = DashboardServer::Start(dashboard_.get(), same);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ps::coordinator
