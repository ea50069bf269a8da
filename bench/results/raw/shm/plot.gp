set terminal pngcairo noenhanced size 1600,720 font 'DejaVu Sans,10'
set output '/tmp/shm1/raw/.shm.new.16245/shm.png'
set multiplot layout 1,2 title 'Shared memory on vm: tmx vs UCX vs libfabric vs Open MPI, cores 0 and 1, median of 3 round(s), 2026-11-28'
set logscale xy; set grid xtics ytics lc rgb '#dddddd'
set xtics ('1' 1, '16' 16, '256' 256, '4K' 4096, '64K' 65536, '1M' 1048576, '16M' 16777216)
set xlabel 'message size (bytes)'; set xrange [0.7:16777216*1.5]
set style line 1 lc rgb '#d62728' lw 2.5 pt 7 ps 0.6
set style line 2 lc rgb '#1f77b4' lw 2 pt 5 ps 0.6
set style line 3 lc rgb '#2ca02c' lw 2 pt 9 ps 0.7
set style line 4 lc rgb '#9467bd' lw 2 pt 11 ps 0.7
set title 'latency, one way (lower is better)'; set ylabel 'microseconds'; set key top left box opaque
plot 'raw/p_tmx_swlat.dat' u 1:2 w lp ls 1 t 'tmx (tmx-perf -t lat)', 'raw/p_ucx_swlat.dat' u 1:2 w lp ls 2 t 'UCX (ucx_perftest tag_lat, mean)', 'raw/p_libfabric_swlat.dat' u 1:2 w lp ls 3 t 'libfabric shm (fi_pingpong)', 'raw/p_openmpi_swlat.dat' u 1:2 w lp ls 4 t 'Open MPI vader (NetPIPE)', 0.0609 w l dt 3 lc rgb 'black' lw 1.5 t 'one cache line, core to core (limit)'
set title 'bandwidth (higher is better): solid = streaming, dashed = ping-pong (size / one-way time)'
set ylabel 'MB/s (10^6 B/s)'; set key bottom right box opaque
plot 'raw/p_tmx_swbw.dat' u 1:2 w lp ls 1 t 'tmx streaming (-t bw, window 64)', 'raw/p_ucx_swbw.dat' u 1:2 w lp ls 2 t 'UCX streaming (tag_bw -O 64)', 'raw/p_tmx_swpbw.dat' u 1:2 w lp ls 1 dt 2 t 'tmx ping-pong', 'raw/p_ucx_swpbw.dat' u 1:2 w lp ls 2 dt 2 t 'UCX ping-pong', 'raw/p_libfabric_swpbw.dat' u 1:2 w lp ls 3 dt 2 t 'libfabric ping-pong', 'raw/p_openmpi_swpbw.dat' u 1:2 w lp ls 4 dt 2 t 'Open MPI ping-pong', 'raw/p_openmpi_bw.dat' u 1:2 w p ls 4 pt 13 ps 1.8 t 'Open MPI streaming (NetPIPE -s)', 'raw/p_process_vm_readv.dat' u 1:2 w p pt 6 ps 2.2 lw 2 lc rgb 'black' t 'process_vm_readv (limit)', 'raw/p_memcpy.dat' u 1:2 w p pt 3 ps 2.2 lw 2 lc rgb 'black' t 'memcpy, one core (limit)'
unset multiplot
