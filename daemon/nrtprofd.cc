#include "daemon/nrtprofd_main.h"

int main(int argc, char** argv) { return nrtprof::daemon::NrtprofdMain(argc, argv); }
