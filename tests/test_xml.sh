# shellcheck shell=bash
# The JUnit XML of a shell test that is one test case, so that tools/test.sh
# counts a skip as a skip (Bazel 4.2.3 reports an exit-0 skip as PASSED).
# Sourced; the test sets TEST_XML_SUITE and TEST_XML_CASE and start_s (its
# $SECONDS at the start), then calls write_xml pass|skip|fail MESSAGE.
# Without XML_OUTPUT_FILE (run by hand) it does nothing.
write_xml() {
  [[ -n "${XML_OUTPUT_FILE:-}" ]] || return 0
  local body="" msg=${2//&/&amp;}
  msg=${msg//</&lt;}
  msg=${msg//\"/&quot;}
  case $1 in
    skip) body="<skipped message=\"$msg\"/>" ;;
    fail) body="<failure message=\"$msg\"/>" ;;
  esac
  cat >"$XML_OUTPUT_FILE" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="$TEST_XML_SUITE" tests="1" failures="$([[ $1 == fail ]] && echo 1 || echo 0)" skipped="$([[ $1 == skip ]] && echo 1 || echo 0)">
<testcase name="$TEST_XML_CASE" classname="tests.$TEST_XML_SUITE" time="$((SECONDS - ${start_s:-0}))">$body</testcase>
</testsuite></testsuites>
EOF
}
