#include "client/commands.h"

int main(int argc, char** argv) { return nrtprof::cli::CliMain(argc, argv); }
