set terminal pngcairo noenhanced size 2100,720 font 'DejaVu Sans,10'
set output 'bench/results/raw/.openmpi.new.18115/openmpi.png'
set multiplot layout 1,3 title 'Open MPI 4.1.4, osu_p2p, 2 ranks on cores 0 and 1 of vm: over tmx vs its own transports, median of 3 round(s), 2026-11-29'
set logscale xy; set grid xtics ytics lc rgb '#dddddd'
set xtics ('1' 1, '16' 16, '256' 256, '4K' 4096, '64K' 65536, '1M' 1048576, '16M' 16777216)
set xlabel 'message size (bytes)'; set xrange [0.7:16777216*1.5]
set style line 1 lc rgb '#d62728' lw 2.5 pt 7 ps 0.6
set style line 2 lc rgb '#1f77b4' lw 2 pt 5 ps 0.6
set style line 3 lc rgb '#2ca02c' lw 2 pt 9 ps 0.7
set style line 4 lc rgb '#ff7f0e' lw 2 pt 11 ps 0.7
set style line 5 lc rgb '#d62728' lw 2 dt 2 pt 6 ps 0.7
set style line 6 lc rgb '#7f7f7f' lw 2 dt 2 pt 4 ps 0.7
set title 'latency, one way: mean of the round trips / 2 (lower is better)'; set ylabel 'microseconds'; set key top left box opaque
plot 'raw/p_tmx_lat.dat' u 1:2 w lp ls 1 t 'Open MPI over tmx (shm)', 'raw/p_vader_lat.dat' u 1:2 w lp ls 2 t 'ob1 + btl vader', 'raw/p_ucx_lat.dat' u 1:2 w lp ls 3 t 'pml ucx', 'raw/p_rxm_lat.dat' u 1:2 w lp ls 4 t 'mtl ofi tcp;ofi_rxm (loopback)', 'raw/p_tmxudp_lat.dat' u 1:2 w lp ls 5 t '2 hosts: Open MPI over tmx (udp)', 'raw/p_tcp_lat.dat' u 1:2 w lp ls 6 t '2 hosts: ob1 + btl tcp'
set title 'latency, one way: median round trip / 2 (lower is better)'
plot 'raw/p_tmx_latmed.dat' u 1:2 w lp ls 1 t 'Open MPI over tmx (shm)', 'raw/p_vader_latmed.dat' u 1:2 w lp ls 2 t 'ob1 + btl vader', 'raw/p_ucx_latmed.dat' u 1:2 w lp ls 3 t 'pml ucx', 'raw/p_rxm_latmed.dat' u 1:2 w lp ls 4 t 'mtl ofi tcp;ofi_rxm (loopback)', 'raw/p_tmxudp_latmed.dat' u 1:2 w lp ls 5 t '2 hosts: Open MPI over tmx (udp)', 'raw/p_tcp_latmed.dat' u 1:2 w lp ls 6 t '2 hosts: ob1 + btl tcp'
set title 'bandwidth, windows of 64 MPI_Isend + ack (higher is better)'; set ylabel 'MB/s (10^6 B/s)'; set key bottom right box opaque
plot 'raw/p_tmx_bw.dat' u 1:2 w lp ls 1 t 'Open MPI over tmx (shm)', 'raw/p_vader_bw.dat' u 1:2 w lp ls 2 t 'ob1 + btl vader', 'raw/p_ucx_bw.dat' u 1:2 w lp ls 3 t 'pml ucx', 'raw/p_rxm_bw.dat' u 1:2 w lp ls 4 t 'mtl ofi tcp;ofi_rxm (loopback)', 'raw/p_tmxudp_bw.dat' u 1:2 w lp ls 5 t '2 hosts: Open MPI over tmx (udp)', 'raw/p_tcp_bw.dat' u 1:2 w lp ls 6 t '2 hosts: ob1 + btl tcp'
unset multiplot
