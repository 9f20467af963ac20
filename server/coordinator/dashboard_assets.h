// The dashboard's page and script (dashboard/index.html, dashboard/
// dashboard.js), embedded in the binary by a genrule (BUILD.bazel), so
// that an installed coordinator needs no files beside it but chart.js.
#ifndef PS_SERVER_COORDINATOR_DASHBOARD_ASSETS_H_
#define PS_SERVER_COORDINATOR_DASHBOARD_ASSETS_H_

namespace ps::coordinator {

extern const char kDashboardHtml[];
extern const char kDashboardJs[];

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_DASHBOARD_ASSETS_H_
