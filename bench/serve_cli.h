// `loom bench serve`: the serving benchmark's command line (flags, workload
// set-up, warm-up, one run or a sweep of request rates, JSON + Markdown
// report, PNG plot of a sweep). See bench/README.md.
#pragma once

namespace loom::bench {

// argv[0] is "serve". Returns the process exit code.
int bench_serve_main(int argc, char** argv);

}  // namespace loom::bench
