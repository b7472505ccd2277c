#include <cstdio>
int main() { std::puts("h3rt"); return 0; }
